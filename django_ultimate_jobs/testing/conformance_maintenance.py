"""The maintenance half of the conformance suite: counters, roll-up, purges.

``driver.maintenance`` deletes what the retention sweep retires and folds
the counter tiers; the settle verbs keep the 1-minute counter buckets.
Internal to :mod:`django_ultimate_jobs.testing.conformance`, whose
``DriverConformance`` inherits these checks (fixtures ``lane``, ``driver``,
``clock``, ``counters``, ``step_names``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..drivers.base import COUNTER_FIELDS, ClaimedJob, CounterBucket, JobDriver
from ..drivers.steps import StepFence, StepRecord

if TYPE_CHECKING:
    from ..clock import ManualClock
    from .conformance import Lane

__all__ = ["COUNTER_FIELDS", "MaintenanceConformance"]

_MINUTE_MS, _FIVE_MINUTES_MS, _HOUR_MS = 60_000, 300_000, 3_600_000


def _minute(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def _bucket(**counts: int) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in COUNTER_FIELDS}


def _step(driver: JobDriver, job: ClaimedJob, name: str, at: datetime) -> None:
    record = StepRecord(run_id=job.run_id, name=name, status="completed", started_at=at)
    driver.steps.put(record, StepFence(job.id, job.identity))


class MaintenanceConformance:
    """Checks of the counters and ``driver.maintenance`` (mixed into DriverConformance)."""

    def test_counters_follow_settles(self, lane, clock, counters):
        """Each settle adds exactly its outcome to the job's 1-minute bucket."""
        clock.advance(seconds=30)
        minute = (_MINUTE_MS, _minute(clock.now()))

        def settled(suffix: str, **nack: Any) -> dict[Any, Any]:
            other = lane.sibling(suffix)
            other.enqueue(max_attempts=9)
            job = other.claim_one()
            if nack:
                other.nack(job, duration_ms=7, **nack)
            else:
                other.ack(job, duration_ms=25, counted=suffix != "quiet")
            return counters(other.job)

        assert settled("done") == {minute: _bucket(done=1, duration_ms=25, pickups=1)}
        assert settled("quiet") == {}
        assert settled("retried", error="X_F: f") == {
            minute: _bucket(retried=1, duration_ms=7, pickups=1)
        }
        assert settled("shed", counts_as_attempt=False) == {}
        assert settled("parked", park=True) == {}
        dead = _bucket(dead=1, duration_ms=7, pickups=1)
        failed = _bucket(failed=1, duration_ms=7, pickups=1)
        assert settled("dead", dead_letter=True) == {minute: dead}
        assert settled("failed", fail=True) == {minute: failed}

    def test_counters_count_burials(self, lane, clock, counters):
        """A burial counts dead, or failed for a dropped job, with no duration."""
        dropped = lane.sibling("dropped")
        lane.enqueue(max_attempts=1)
        dropped.enqueue(max_attempts=1)
        lane.started(lane.claim_one())
        dropped.started(dropped.claim_one())
        clock.advance(milliseconds=30_000)
        both = [lane.queue, dropped.queue]
        assert len(lane.claim(queues=both, drop=frozenset({dropped.job})).buried) == 2
        minute = (_MINUTE_MS, _minute(clock.now()))
        assert counters(lane.job) == {minute: _bucket(dead=1)}
        assert counters(dropped.job) == {minute: _bucket(failed=1)}

    def test_counter_buckets_per_queue_with_pickup_latency(self, lane, driver, clock):
        """A bucket per job name and queue; pickup runs from due to claimed.

        A retried hand-back's pickup is measured from the run_at it was
        claimed at, not the later one it is handed back with.
        """
        clock.advance(seconds=5)
        since = _minute(clock.now())
        other = replace(lane, queue=f"{lane.queue}-other")
        lane.enqueue()
        other.enqueue(delay_ms=2_000)
        clock.advance(seconds=3)
        assert lane.ack(lane.claim_one(), duration_ms=10)
        assert other.nack(other.claim_one(), duration_ms=7, error="X_F: f")
        minute = _minute(clock.now())
        buckets = [b for b in driver.counter_buckets(since) if b.job == lane.job]
        common = {"job": lane.job, "width_ms": _MINUTE_MS, "start": minute}
        assert buckets == [
            CounterBucket(
                queue=lane.queue,
                done=1,
                duration_ms=10,
                pickups=1,
                pickup_ms=3_000,
                **common,
            ),
            CounterBucket(
                queue=other.queue,
                retried=1,
                duration_ms=7,
                pickups=1,
                pickup_ms=1_000,
                **common,
            ),
        ]
        assert [
            b.job for b in driver.counter_buckets(minute + timedelta(minutes=1))
        ] == []

    def test_rollup_folds_counter_tiers(self, lane, driver, clock, counters):
        """Rollup folds minutes after a day and fives after a week; drops at 30 days."""
        for duration_ms in (10, 5):
            lane.enqueue()
            lane.ack(lane.claim_one(), duration_ms=duration_ms)
        start = _minute(clock.now())
        summed = _bucket(done=2, duration_ms=15, pickups=2)
        assert counters(lane.job) == {(_MINUTE_MS, start): summed}
        clock.advance(hours=24, minutes=1)
        assert driver.maintenance.rollup_counters() >= 1
        five = start.replace(minute=start.minute - start.minute % 5)
        assert counters(lane.job) == {(_FIVE_MINUTES_MS, five): summed}
        clock.advance(days=7)
        assert driver.maintenance.rollup_counters() >= 1
        assert counters(lane.job) == {(_HOUR_MS, start.replace(minute=0)): summed}
        clock.advance(days=30)
        assert driver.maintenance.rollup_counters() >= 1
        assert counters(lane.job) == {}

    def test_purge_jobs_deletes_finished_rows_oldest_first_with_their_steps(
        self, lane: Lane, driver: JobDriver, clock: ManualClock, step_names: Any
    ) -> None:
        """One batch at most ``limit`` rows; live rows and newer ones stay."""
        first, second, third, live = (lane.enqueue() for _ in range(4))
        jobs = lane.claim(limit=4).claimed
        held = {job.id: job for job in jobs}
        _step(driver, held[first.id], "a", clock.now())
        _step(driver, held[first.id], "b", clock.now())
        assert lane.ack(held[first.id])
        clock.advance(minutes=1)
        assert lane.ack(held[second.id])
        clock.advance(days=2)
        assert lane.ack(held[third.id])
        before = clock.now() - timedelta(days=1)
        maintenance = driver.maintenance
        assert maintenance.purge_jobs("failed", before, limit=10) == (0, 0)
        assert maintenance.purge_jobs("done", before, limit=1) == (1, 2)
        assert driver.get(first.id) is None and step_names(first.run_id) == set()
        assert maintenance.purge_jobs("done", before, limit=10) == (1, 0)
        assert maintenance.purge_jobs("done", before, limit=10) == (0, 0)
        assert driver.get(second.id) is None
        assert lane.row(third.id).state == "done"
        assert lane.row(live.id).state == "running"

    def test_purge_jobs_failed_takes_failed_dead_and_cancelled_rows(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """The ``failed`` kind is every unsuccessful end; ``done`` rows stay."""
        for _ in range(4):
            lane.enqueue()
        failed, dead, done, cancelled = lane.claim(limit=4).claimed
        never_claimed = lane.enqueue().id
        assert lane.nack(failed, fail=True, error="X_F: f")
        assert lane.nack(dead, dead_letter=True, error="X_D: d")
        assert lane.ack(done)
        driver.cancel(cancelled.id)
        driver.cancel(never_claimed)
        ids = [failed.id, dead.id, done.id, cancelled.id, never_claimed]
        clock.advance(days=2)
        before = clock.now() - timedelta(days=1)
        assert driver.maintenance.purge_jobs("failed", before, limit=100) == (4, 0)
        assert [driver.get(i) is None for i in ids] == [True, True, False, True, True]

    def test_purge_events_and_locks_delete_only_what_lapsed(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """Events expired at ``now``; ``lock:`` rows lapsed before ``before``."""
        event = f"{lane.job}.evt"
        driver.events.publish(event, {}, None, 1_000)
        driver.events.publish(event, {}, None, 1_000)
        driver.events.publish(event, {}, None, 60_000)
        leases = driver.leases
        assert leases.acquire(f"lock:{lane.job}:1", 1, 1_000, "h1")
        assert leases.acquire(f"lock:{lane.job}:2", 1, 1_000, "h2")
        assert leases.acquire(f"job:{lane.job}", 1, 1_000, "w:1")
        assert leases.acquire(f"lock:{lane.job}:3", 1, 60_000, "h3")
        clock.advance(seconds=2)
        maintenance = driver.maintenance
        assert maintenance.purge_events(clock.now(), limit=1) == 1
        assert maintenance.purge_events(clock.now(), limit=10) == 1
        assert maintenance.purge_events(clock.now(), limit=10) == 0
        assert maintenance.purge_locks(clock.now(), limit=1) == 1
        assert maintenance.purge_locks(clock.now(), limit=10) == 1
        assert maintenance.purge_locks(clock.now(), limit=10) == 0
        keys = [r.key for r in leases.records() if lane.job in r.key]
        assert keys == [f"job:{lane.job}", f"lock:{lane.job}:3"]

    def test_drop_counters_deletes_hour_buckets_past_30_days(
        self, lane: Lane, driver: JobDriver, clock: ManualClock, counters: Any
    ) -> None:
        """Only 1-hour buckets older than 30 days at ``now``; nothing else."""
        lane.enqueue()
        lane.ack(lane.claim_one(), duration_ms=3)
        start = _minute(clock.now())
        clock.advance(hours=24, minutes=1)
        driver.maintenance.rollup_counters()
        clock.advance(days=7)
        driver.maintenance.rollup_counters()
        hour = (_HOUR_MS, start.replace(minute=0))
        assert counters(lane.job) == {hour: _bucket(done=1, duration_ms=3, pickups=1)}
        maintenance = driver.maintenance
        assert maintenance.drop_counters(start + timedelta(days=29)) == 0
        assert maintenance.drop_counters(start + timedelta(days=31)) == 1
        assert counters(lane.job) == {}
