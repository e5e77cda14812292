"""job(concurrency=...) across a fleet of real ``runjobs`` processes (issue 14).

Three workers of 8 slots each serve capped jobs whose bodies record their
start and end (database clock) in ``SlotRun``: the start is written after
the claim took the slot, the end before the settle frees it, so counting
overlapping runs per key counts slots held at once. A SIGKILLed holder's
run has no end: it is closed at the kill, and its slot must come back
within one lease window (workers here lease for 2 s, see conftest).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from datetime import datetime, timedelta

import pytest

from django_ultimate_jobs.models import Job
from django_ultimate_jobs.registry import unregister
from tests.jobsapp.models import SlotRun
from tests.support.rows import db_now
from tests.support.waiting import wait_until

from .conftest import VISIBILITY

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PICKUP_S = 20.0
LEASE_S = float(VISIBILITY.removesuffix("s"))
# A lapsed slot is re-taken at the next claim: within a poll and a renewal
# of the lease passing (workers poll every 50 ms, renew every 500 ms).
RETURN_SLACK_S = 1.5


@pytest.fixture
def limit_jobs():
    """The capped jobs, declared in this process for the test only."""
    from tests.jobsapp import limit_jobs

    yield limit_jobs
    for handle in (limit_jobs.capped_two, limit_jobs.keyed_one):
        unregister(handle.name)
    sys.modules.pop("tests.jobsapp.limit_jobs", None)


def _start_fleet(fleet, count: int = 3) -> list:
    env = {"UJ_LIMIT_JOBS": "1"}
    return [
        fleet.start("--queues", "limits", "--concurrency", "8", env=env)
        for _ in range(count)
    ]


def _all_done(names: list[str], total: int):
    def done() -> bool:
        return Job.objects.filter(name__in=names, state="done").count() == total

    done.__name__ = f"all_{total}_done"
    return done


def _most_at_once(runs: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant (an end before a start at a tie)."""
    edges = sorted(
        [(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs],
        key=lambda edge: (edge[0], edge[1]),
    )
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def _runs_by_key(
    cut: datetime | None = None,
) -> dict[str, list[tuple[datetime, datetime]]]:
    by_key: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for run in SlotRun.objects.all():
        end = run.ended_at or cut
        assert end is not None, f"a run never ended: {run}"
        by_key[run.key].append((run.started_at, end))
    return by_key


def test_cap_of_two_holds_across_three_workers_and_a_sigkill(fleet, limit_jobs):
    """300 jobs of 50 ms, concurrency=2: never more than 2 at once, all done."""
    limit_jobs.capped_two.enqueue_many([{"sleep_ms": 50}] * 300)
    workers = _start_fleet(fleet)
    by_pid = {w.pid: w for w in workers}

    def two_running() -> bool:
        return SlotRun.objects.filter(ended_at__isnull=True).count() == 2

    # Mid-run, kill a worker holding a slot (its body is between start and end).
    wait_until(
        lambda: SlotRun.objects.filter(ended_at__isnull=False).count() >= 40,
        PICKUP_S,
        message=fleet.logs,
    )
    wait_until(two_running, PICKUP_S, message=fleet.logs)
    holder = SlotRun.objects.filter(ended_at__isnull=True).first()
    victim = by_pid[int(holder.worker.split(":")[1])]
    victim.kill()
    killed_at = db_now()
    orphans = list(SlotRun.objects.filter(worker=holder.worker, ended_at__isnull=True))
    assert orphans, "the victim held no run at its death"

    wait_until(_all_done(["tests.capped_two"], 300), 60, message=fleet.logs)
    # The victim's unfinished runs ended when it died.
    SlotRun.objects.filter(worker=holder.worker, ended_at__isnull=True).update(
        ended_at=killed_at
    )
    (runs,) = _runs_by_key().values()
    assert _most_at_once(runs) == 2  # the cap was used, and never passed
    # The dead holder's slot came back within one lease window: two runs
    # overlapped again soon after the kill.
    after = sorted(r for r in runs if r[0] >= killed_at)
    regained = next(
        (
            max(a[0], b[0])
            for i, a in enumerate(after)
            for b in after[i + 1 :]
            if b[0] < a[1] and a[0] < b[1]
        ),
        None,
    )
    assert regained is not None, "never two runs at once after the kill"
    assert regained - killed_at < timedelta(seconds=LEASE_S + RETURN_SLACK_S)
    assert (
        Job.objects.filter(name="tests.capped_two").exclude(state="done").count() == 0
    )


def test_keyed_limit_of_one_over_100_keys(fleet, limit_jobs):
    """3,000 jobs of 5 ms over 100 keys, limit 1: never 2 of a key at once."""
    limit_jobs.keyed_one.enqueue_many(
        [{"key": n % 100, "sleep_ms": 5} for n in range(3_000)]
    )
    _start_fleet(fleet)
    wait_until(_all_done(["tests.keyed_one"], 3_000), 60, message=fleet.logs)
    by_key = _runs_by_key()
    assert len(by_key) == 100
    assert sum(len(runs) for runs in by_key.values()) == 3_000
    worst = {key: _most_at_once(runs) for key, runs in by_key.items()}
    assert max(worst.values()) == 1, {k: v for k, v in worst.items() if v > 1}
    # Keys ran side by side: the fleet was not serialised onto one slot.
    all_runs = [run for runs in by_key.values() for run in runs]
    assert _most_at_once(all_runs) > 8
