"""Conformance checks of the cron-task calls: sync, fire, leader lease, pauses.

Subclass :class:`CronConformance` with the two fixtures of
:class:`~django_ultimate_jobs.testing.conformance.DriverConformance`:
``clock`` (a :class:`~django_ultimate_jobs.clock.ManualClock`) and
``driver`` (a fresh driver reading it). Every check uses its own task and
lease names, so checks can share a store.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..drivers.base import EnqueueRequest, JobDriver
from ..drivers.cron import TaskArm, TaskFire

__all__ = ["CronConformance"]


def _arm(
    driver: JobDriver, name: str, at: datetime, cron: str = "* * * * *"
) -> datetime:
    return driver.cron.task_sync(
        [TaskArm(name=name, cron=cron, tz="UTC", watermark=at)]
    )[name]


def _fire(
    name: str,
    expected: datetime,
    occurrence: datetime,
    keys: list[str],
    **fields: Any,
) -> TaskFire:
    """A fire of ``name``'s occurrence: one job per key (``fields`` on each)."""
    return TaskFire(
        name=name,
        expected=expected,
        watermark=occurrence,
        occurrence=occurrence,
        next_run_at=occurrence + timedelta(minutes=1),
        jobs=[
            EnqueueRequest(
                name=f"{name}.job",
                input={},
                idempotency_key=key,
                run_at=occurrence,
                **fields,
            )
            for key in keys
        ],
    )


class CronConformance:
    """What every driver answers to the scheduler's calls."""

    def test_sync_arms_a_new_task_once_and_never_moves_a_watermark(
        self, driver: Any, clock: Any
    ) -> None:
        """A later sync answers the stored watermark; a new cron is recorded."""
        first = clock.now()
        assert _arm(driver, "conf.cron.sync", first) == first
        assert _arm(driver, "conf.cron.sync", first + timedelta(hours=1)) == first
        later = first + timedelta(hours=2)
        assert _arm(driver, "conf.cron.sync", later, cron="@daily") == first
        (record,) = [t for t in driver.cron.task_list() if t.name == "conf.cron.sync"]
        assert (record.cron, record.watermark) == ("@daily", first)

    def test_a_fire_lands_once_and_inserts_its_jobs(
        self, driver: Any, clock: Any
    ) -> None:
        """Fenced on the watermark read: the same fire again answers None."""
        armed = _arm(driver, "conf.cron.fire", clock.now())
        occurrence = armed + timedelta(minutes=1)
        fire = _fire("conf.cron.fire", armed, occurrence, ["a", "b"])
        landed = driver.cron.task_fire(fire)
        assert landed is not None and len(landed.inserted) == 2
        assert landed.deduped == 0
        assert driver.cron.task_fire(fire) is None
        (record,) = [t for t in driver.cron.task_list() if t.name == "conf.cron.fire"]
        assert (record.watermark, record.last_occurrence) == (occurrence, occurrence)
        job = driver.get(landed.inserted[0])
        assert (job.run_at, job.idempotency_key) == (occurrence, "a")

    def test_a_fire_that_meets_a_live_key_moves_the_watermark_and_dedupes(
        self, driver: Any, clock: Any
    ) -> None:
        """The live unique index is the second guard: nothing doubles."""
        armed = _arm(driver, "conf.cron.dedupe", clock.now())
        occurrence = armed + timedelta(minutes=1)
        driver.enqueue(
            EnqueueRequest(name="conf.cron.dedupe.job", input={}, idempotency_key="k")
        )
        landed = driver.cron.task_fire(
            _fire("conf.cron.dedupe", armed, occurrence, ["k"])
        )
        assert landed is not None
        assert (landed.inserted, landed.deduped) == ([], 1)

    def test_a_fire_not_after_the_watermark_is_refused(
        self, driver: Any, clock: Any
    ) -> None:
        armed = _arm(driver, "conf.cron.past", clock.now())
        assert (
            driver.cron.task_fire(_fire("conf.cron.past", armed, armed, ["x"])) is None
        )

    def test_the_leader_lease_is_held_renewed_and_taken_once_lapsed(
        self, driver: Any, clock: Any
    ) -> None:
        key = "conf.cron.lease"
        assert driver.cron.leader_acquire(key, "a", ttl_ms=30_000)
        assert not driver.cron.leader_acquire(key, "b", ttl_ms=30_000)
        clock.advance(seconds=20)
        assert driver.cron.leader_acquire(key, "a", ttl_ms=30_000)  # renewed
        clock.advance(seconds=20)
        assert not driver.cron.leader_acquire(key, "b", ttl_ms=30_000)
        clock.advance(seconds=10)
        assert driver.cron.leader_acquire(key, "b", ttl_ms=30_000)  # lapsed: taken
        assert not driver.cron.leader_acquire(key, "a", ttl_ms=30_000)
        driver.cron.leader_release(key, "a")  # not the holder: nothing happens
        assert not driver.cron.leader_acquire(key, "a", ttl_ms=30_000)
        driver.cron.leader_release(key, "b")
        assert driver.cron.leader_acquire(key, "a", ttl_ms=30_000)

    def test_task_pauses_are_rows_apart_from_queue_pauses(
        self, driver: Any, clock: Any
    ) -> None:
        """The first pause's time is kept; a task pause pauses no queue."""
        paused_at = clock.now()
        assert [p.name for p in driver.cron.pause_task("conf.cron.paused")] == [
            "conf.cron.paused"
        ]
        clock.advance(seconds=5)
        (again,) = [
            p
            for p in driver.cron.pause_task("conf.cron.paused")
            if p.name == "conf.cron.paused"
        ]
        assert again.paused_at == paused_at
        assert "conf.cron.paused" not in [p.name for p in driver.paused_queues()]
        remaining = driver.cron.resume_task("conf.cron.paused")
        assert "conf.cron.paused" not in [p.name for p in remaining]
