"""How the threaded worker hands claimed jobs to its slots.

A real ``Worker.run()`` in a thread, on PostgreSQL, with committed rows
(``transactional_db``): slots and the settler use their own connections.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from django_ultimate_jobs.models import Job
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.runner import Worker
from django_ultimate_jobs.worker.slots import CHUNK_MIN, CHUNK_YIELD_S
from tests.support.waiting import wait_until

pytestmark = pytest.mark.postgres

SLOW_S = 0.4


def test_a_slow_job_in_a_chunk_hands_its_chunk_mates_to_other_slots(
    committed_pg_driver, declare_jobs
):
    """Very short jobs reach a slot in chunks; one slow job must hold neither
    the rest of its chunk nor the settles of those before it until it ends."""
    declared = declare_jobs("dispatch", "t.dispatch")
    started: dict[str, float] = {}
    slow_ended: list[float] = []
    settled_while_slow_ran: list[int] = []

    @declared()
    def quick(ctx, n: int):
        started[f"quick-{n}"] = time.monotonic()

    @declared(priority=20)
    def first(ctx, n: int):
        started[f"first-{n}"] = time.monotonic()

    @declared(priority=10)
    def slow(ctx):
        # Claimed after the three `first` jobs and before the quick ones
        # (priorities), so it sits inside the first chunk.
        started["slow"] = time.monotonic()
        ctx.cancellation.wait(SLOW_S)
        settled_while_slow_ran.append(
            Job.objects.filter(name=first.name, state="done").count()
        )
        slow_ended.append(time.monotonic())

    worker = Worker(
        WorkerConfig.from_settings(queues=("dispatch",), concurrency=8),
        driver=committed_pg_driver,
    )

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()  # the claim loop's own connection

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        # Teach the worker that jobs here are very short (mean < 1 ms), so
        # it starts handing them out in chunks.
        quick.enqueue_many([{"n": n} for n in range(200)])
        wait_until(
            lambda: Job.objects.filter(name=quick.name, state="done").count() == 200,
            30,
            message="the warm-up jobs never finished",
        )
        assert worker.slots.chunk_size(64) >= CHUNK_MIN  # chunks from here on
        started.clear()

        # One commit: the next claim takes all 64 together, and the first
        # chunk is the three `first` jobs, the slow one, then quick ones.
        with transaction.atomic():
            first.enqueue_many([{"n": n} for n in range(3)])
            slow.enqueue()
            quick.enqueue_many([{"n": n} for n in range(200, 260)])
        wait_until(lambda: bool(slow_ended), 30, message="the slow job never finished")
        wait_until(
            lambda: Job.objects.exclude(state="done").count() == 0,
            30,
            message="the jobs behind the slow one never finished",
        )
    finally:
        worker.request_stop(deadline_s=5)
        runner.join(10)

    quick_starts = [at for name, at in started.items() if name.startswith("quick-")]
    assert len(quick_starts) == 60
    # Every chunk-mate started while the slow body was still running: the
    # slot handed them back after CHUNK_YIELD_S instead of keeping them.
    late = [at for at in quick_starts if at >= slow_ended[0]]
    assert late == [], (
        f"{len(late)} quick jobs waited for the slow one "
        f"(moved after {CHUNK_YIELD_S} s)"
    )
    # The jobs that ran before the slow one in its chunk were settled while
    # it still ran, not held back until the chunk's end.
    assert settled_while_slow_ran == [3]
