"""The worker tells its own instruments of each attempt, in order, directly."""

from __future__ import annotations

import logging

import pytest

from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.runner import Worker
from tests.jobsapp.jobs import always_fail, noop

pytestmark = pytest.mark.postgres


def test_each_attempt_is_told_started_then_finished_and_a_raising_watcher_is_logged(
    pg_driver, caplog
):
    worker = Worker(WorkerConfig(queues=("default",)), driver=pg_driver)
    told: list[tuple[str, object]] = []

    def broken(claimed):
        raise RuntimeError("a watcher bug")

    def ignore(execution):
        return None

    worker.watchers.watch(
        started=lambda claimed: told.append(("started", claimed.id)),
        finished=lambda execution: told.append(
            ("finished", (execution.claimed.id, execution.outcome, execution.landed))
        ),
    )
    worker.watchers.watch(started=broken, finished=ignore)
    done = noop.enqueue().id
    failed = always_fail.enqueue().id

    with caplog.at_level(logging.ERROR, logger="django_ultimate_jobs"):
        worker.tick()

    assert pg_driver.get(done).state == "done"
    assert told.index(("started", done)) < told.index(
        ("finished", (done, "completed", True))
    )
    assert ("started", failed) in told
    assert any(entry[0] == "finished" and entry[1][0] == failed for entry in told)
    failures = [r for r in caplog.records if r.getMessage() == "jobs.watcher.failed"]
    assert len(failures) == 2 and "broken" in failures[0].watcher

    worker.watchers.unwatch(started=broken, finished=ignore)
    assert broken not in worker.watchers.on_started
    assert ignore not in worker.watchers.on_finished
    assert len(worker.watchers.on_started) == len(worker.watchers.on_finished) == 1
