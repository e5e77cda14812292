"""Task pauses and the task listing, through ``operator`` and ``manage.py jobs``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs import operator, task
from django_ultimate_jobs.crontask import unregister_task
from django_ultimate_jobs.errors import TaskUnknown
from django_ultimate_jobs.worker.scheduler import Scheduler
from tests.jobsapp.jobs import noop

pytestmark = pytest.mark.postgres


def jobs(*args):
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def nightly():
    handle = task(name="tests.cron.nightly", cron="0 3 * * *", tz="UTC", job=noop)
    yield handle
    unregister_task(handle.name)


def test_pause_and_resume_a_task_from_the_command_line(pg_driver, nightly):
    assert jobs("pause", "--task", nightly.name) == "paused tasks: tests.cron.nightly\n"
    answer = json.loads(jobs("--json", "pause", "--task", nightly.name))
    assert [p["name"] for p in answer] == [nightly.name]
    assert pg_driver.paused_queues() == []
    assert jobs("resume", "--task", nightly.name) == "paused tasks: none\n"


def test_an_undeclared_task_is_refused_before_anything_is_written(pg_driver):
    with pytest.raises(TaskUnknown):
        operator.pause_task("tests.cron.typo")
    with pytest.raises(CommandError, match="X_TASK_UNKNOWN"):
        jobs("pause", "--task", "tests.cron.typo")
    assert pg_driver.cron.paused_tasks() == []


def test_pause_needs_a_queue_or_a_task_not_both(pg_driver, nightly):
    with pytest.raises(CommandError, match="not both"):
        jobs("pause", "default", "--task", nightly.name)
    with pytest.raises(CommandError, match="not both"):
        jobs("pause")


def test_the_listing_shows_next_run_last_fire_and_pause(pg_driver, clock, nightly):
    """Before arming: computed next run; after a fire: stored last and next."""
    (before,) = [t for t in operator.tasks() if t["name"] == nightly.name]
    assert (before["armed"], before["paused"], before["last_occurrence"]) == (
        False,
        False,
        None,
    )
    scheduler = Scheduler(driver=pg_driver, clock=clock, tasks=lambda: [nightly])
    scheduler.tick()  # armed at 2030-01-01 12:00
    clock.advance(hours=15)
    scheduler.tick()
    operator.pause_task(nightly.name)
    (after,) = [t for t in operator.tasks() if t["name"] == nightly.name]
    assert after["last_occurrence"] == "2030-01-02T03:00:00+00:00"
    assert after["next_run"] == "2030-01-03T03:00:00+00:00"
    assert after["paused"] and after["declared"] and after["armed"]
    assert "tests.cron.nightly cron='0 3 * * *' tz=UTC" in jobs("tasks")


def test_run_task_enqueues_now_and_leaves_the_schedule_alone(pg_driver, nightly):
    """A manual run queues the job with its own key; nothing is armed or moved."""
    (line,) = jobs("run-task", nightly.name).splitlines()
    job = pg_driver.get(line)
    assert (job.name, job.idempotency_key, job.enqueued_by) == (
        "tests.noop",
        None,
        "task:tests.cron.nightly",
    )
    assert pg_driver.cron.task_list() == []
    with pytest.raises(CommandError, match="X_TASK_UNKNOWN"):
        jobs("run-task", "tests.cron.typo")
