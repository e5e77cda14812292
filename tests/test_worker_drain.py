"""A draining worker starts nothing new: what it holds ahead goes back at once."""

from __future__ import annotations

import threading

import pytest

from django_ultimate_jobs import Concurrency
from django_ultimate_jobs.models import Job, Lease
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.runner import Worker
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_thread

pytestmark = pytest.mark.postgres


def test_a_stop_hands_back_the_rows_held_ahead_at_once(
    committed_pg_driver, declare_jobs
):
    """One slot runs a long job; the capped rows claimed ahead of it are
    handed back the moment the drain begins (ready, no attempt spent, their
    key slots freed), not started after the stop nor held until the
    hand-back near the deadline; the running job still finishes done."""
    declared = declare_jobs("drain", "t.drain")
    release = threading.Event()

    @declared(priority=10)
    def long(ctx):
        release.wait(20)

    @declared(concurrency=Concurrency(key=lambda i: i["k"], limit=1))
    def keyed(ctx, *, k: str):
        return None

    # Short runs first: a worker holds capped rows ahead only while its
    # jobs are short.
    warm = [keyed.enqueue(k="warm").id for _ in range(5)]
    worker = Worker(
        WorkerConfig.from_settings(queues=("drain",), concurrency=1),
        driver=committed_pg_driver,
    )

    runner = start_worker_thread(worker)
    try:
        wait_until(
            lambda: Job.objects.filter(id__in=warm, state="done").count() == 5, 15
        )
        running = long.enqueue().id
        wait_until(lambda: Job.objects.get(id=running).state == "running", 15)
        # The only slot is busy: these are claimed ahead, not started.
        ahead = [keyed.enqueue(k=f"k{n}").id for n in range(4)]
        wait_until(
            lambda: Job.objects.filter(id__in=ahead, state="running").count() == 4,
            15,
            message=lambda: f"{list(Job.objects.values_list('name', 'state'))}",
        )
        assert Job.objects.get(id=running).state == "running"
        worker.request_stop(deadline_s=30)
        # Back well before deadline - margin/2 (29 s), the long job still running.
        wait_until(
            lambda: Job.objects.filter(id__in=ahead, state="ready").count() == 4,
            5,
            message=lambda: f"{list(Job.objects.values_list('name', 'state'))}",
        )
        assert Job.objects.get(id=running).state == "running"
        assert not Lease.objects.filter(lease_key__startswith="job-key:").exists()
        release.set()
        wait_until(lambda: not runner.is_alive(), 15, message="no exit")
    finally:
        release.set()
        worker.request_stop(deadline_s=2)
        runner.join(5)
    assert Job.objects.get(id=running).state == "done"
    rows = Job.objects.filter(id__in=ahead)
    assert {(r.state, r.attempt) for r in rows} == {("ready", 0)}
