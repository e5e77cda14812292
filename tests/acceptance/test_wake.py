"""LISTEN/NOTIFY is a hint (I-HINT): it makes pickup fast, polling makes it sure.

Both workers run with the package's default poll timings (250 ms floor,
2 s idle ceiling, 5 s once the wake is proven). The test watches the
worker's claim statements in ``pg_stat_activity`` until the idle backoff
has grown past the latency being asserted, then enqueues right after a
claim pass: only a wake can make the pickup faster than the next poll.
Latency is measured on the database clock, from the enqueue (the row's
``created_at``) to the job's effect.
"""

from __future__ import annotations

import pytest

from tests.jobsapp.jobs import effect
from tests.support.claims import ClaimPasses
from tests.support.rows import effects_of, job_row
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DEFAULT_POLLS = {"UJ_POLL": "", "UJ_IDLE_POLL_MAX": ""}
IDLE_CEILING_S = 2.0  # IDLE_POLL_MAX's default


def _pickup_latency(fleet, worker, gap_s: float, timeout: float) -> float:
    passes = ClaimPasses()
    wait_until(passes.idle_gap_reached(gap_s), 20, interval=0.02, message=fleet.logs)
    # Right after a claim pass: the next poll is at least gap_s away.
    job_id = effect.enqueue().id
    ran = wait_until(
        lambda: effects_of(job_id), timeout, interval=0.02, message=fleet.logs
    )
    return (ran[0].at - job_row(job_id).created_at).total_seconds()


def test_idle_worker_is_woken_by_notify(fleet):
    worker = fleet.start(env=DEFAULT_POLLS, name="listening")
    worker.wait_for_output("jobs.wake.live", 20)
    # With the wake proven the ceiling is 5 s: after a 2 s gap the next
    # poll is 4 s away, so a sub-second pickup is the wake's doing.
    latency = _pickup_latency(fleet, worker, IDLE_CEILING_S - 0.1, timeout=10)
    print(f"\nwake: commit->effect {latency * 1000:.0f} ms (LISTEN/NOTIFY)")
    assert latency < 1.0


def test_no_wake_worker_still_picks_up_within_the_idle_ceiling(fleet):
    worker = fleet.start("--no-wake", env=DEFAULT_POLLS, name="polling")
    latency = _pickup_latency(fleet, worker, IDLE_CEILING_S - 0.1, timeout=10)
    print(f"\nwake: commit->effect {latency * 1000:.0f} ms (--no-wake, polling)")
    assert latency < IDLE_CEILING_S + 0.5
    assert "jobs.wake.live" not in worker.output()
