"""Due jobs start on time on an idle worker (issue 22, item 4).

The worker runs the package's poll timings (250 ms doubling to 5 s once
its wake is proven): a job found by a poll starts up to seconds late. A
job enqueued to run later sends a timed wake, and a retry is known to the
worker that wrote it, so the worker sleeps until the row falls due. The
lateness is read from the database clock: the effect the body wrote
(``Effect.at``) against the row's ``run_at``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.jobsapp.jobs import effect, retry_in_a_second
from tests.jobsapp.models import Effect
from tests.support.claims import ClaimPasses
from tests.support.rows import db_now, effects_of, job_row
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DEFAULT_POLLS = {"UJ_POLL": "", "UJ_IDLE_POLL_MAX": ""}
IDLE_GAP_S = 1.9  # two claims this far apart: the next is about 4 s away


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def _idle_worker(fleet):
    """A worker that ran some jobs (its slots hold their connections) and
    has been idle long enough for its next poll to be seconds away."""
    worker = fleet.start("--no-scheduler", env=DEFAULT_POLLS, name="idle")
    worker.wait_for_output("jobs.wake.live", 20)
    warm = [e.id for e in effect.enqueue_many({"tag": "warm"} for _ in range(32))]
    wait_until(
        lambda: Effect.objects.filter(job_id__in=warm).count() == 32,
        15,
        message=fleet.logs,
    )
    passes = ClaimPasses()
    wait_until(passes.idle_gap_reached(IDLE_GAP_S), 20, interval=0.02)
    return worker


def test_fifty_jobs_due_in_a_second_start_within_100_ms(fleet):
    _idle_worker(fleet)
    # The next poll is at least IDLE_GAP_S away: only the due timer can
    # start these on time.
    run_at = db_now() + timedelta(seconds=1)
    ids = [effect.using(run_at=run_at).enqueue(tag=str(n)).id for n in range(50)]
    wait_until(
        lambda: Effect.objects.filter(job_id__in=ids).count() == 50,
        15,
        message=fleet.logs,
    )
    rows = [job_row(job_id) for job_id in ids]
    claimed = [(row.claimed_at - row.run_at).total_seconds() for row in rows]
    late = [(effects_of(row.id)[0].at - row.run_at).total_seconds() for row in rows]
    assert min(late) >= 0, late  # none before its time
    p95 = _p95(claimed)
    print(
        f"\nclaimed - run_at: p95 {p95 * 1000:.0f} ms; start - run_at: p95 "
        f"{_p95(late) * 1000:.0f} ms, max {max(late) * 1000:.0f} ms"
    )
    # The due timer claims them on time; running fifty through eight slots
    # then takes what the machine takes (on a slow day the last start is
    # ~100 ms in), far below the next poll's seconds.
    assert p95 < 0.1, sorted(claimed)
    assert max(late) < 1.0, sorted(late)


def test_a_retry_due_in_a_second_starts_on_time(fleet):
    _idle_worker(fleet)
    ids = [retry_in_a_second.enqueue(n=n).id for n in range(3)]
    wait_until(
        lambda: all(len(effects_of(job_id)) == 2 for job_id in ids),
        15,
        message=fleet.logs,
    )
    late = []
    for job_id in ids:
        row = job_row(job_id)
        assert row.state == "done"
        # The retry's run_at: the failed attempt's settle + 1 s.
        late.append((effects_of(job_id)[1].at - row.run_at).total_seconds())
    assert min(late) >= 0, late
    assert max(late) < 0.1, late
