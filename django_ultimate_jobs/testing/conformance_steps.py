"""The step and event stores' half of the conformance suite.

``driver.steps`` keeps a run's step records, every write fenced on the
attempt that makes it (like a settle); ``driver.events`` stores published
events and matches them to the waits that began before them. Internal to
:mod:`django_ultimate_jobs.testing.conformance`, whose ``DriverConformance``
inherits these checks (fixtures ``lane``, ``driver``, ``clock``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from ..drivers.base import ClaimedJob, JobDriver
from ..drivers.steps import MatchedWait, StepFence, StepRecord
from ..errors import JobsError
from ..states import JobState

if TYPE_CHECKING:
    from ..clock import ManualClock
    from .conformance import Lane

__all__ = ["StepsConformance"]

TTL_MS = 60_000


def _fence(job: ClaimedJob) -> StepFence:
    return StepFence(job.id, job.identity)


def _waiting(
    driver: JobDriver, job: ClaimedJob, event: str, key: str | None
) -> StepRecord:
    """Record that ``job``'s run waits for ``event`` from now (as a wait does)."""
    mark = driver.events.mark()
    step = StepRecord(
        run_id=job.run_id,
        name="wait",
        status="waiting",
        started_at=mark.at,
        wake_at=mark.at + timedelta(hours=1),
        event=event,
        correlation_key=key,
        snapshot=mark.snapshot,
    )
    driver.steps.put(step, _fence(job))
    return step


class StepsConformance:
    """Checks of ``driver.steps`` and ``driver.events`` (mixed into DriverConformance)."""

    def test_a_step_is_recorded_for_its_run_and_read_back_by_name(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """A fenced put stores the record; ``list`` answers every step by name."""
        lane.enqueue()
        job = lane.claim_one()
        at = clock.now()
        done = StepRecord(
            run_id=job.run_id,
            name="charge",
            status="completed",
            started_at=at,
            completed_at=at,
            output={"amount": [1, 2.5, "x"]},
        )
        driver.steps.put(done, _fence(job))
        driver.steps.put(
            StepRecord(
                run_id=job.run_id,
                name="mail",
                status="failed",
                started_at=at,
                error="boom",
            ),
            _fence(job),
        )
        steps = driver.steps.list(job.run_id)
        assert sorted(steps) == ["charge", "mail"]
        assert steps["charge"].output == {"amount": [1, 2.5, "x"]}
        assert (steps["charge"].status, steps["charge"].completed_at) == (
            "completed",
            at,
        )
        assert (steps["mail"].status, steps["mail"].error) == ("failed", "boom")
        assert driver.steps.list(lane.enqueue().run_id) == {}

    def test_a_step_write_of_an_attempt_that_lost_its_job_is_refused(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """X_JOB_LEASE_LOST after a cancel or a re-claim; nothing is written."""
        lane.enqueue()
        job = lane.claim_one(visibility_ms=1_000)
        clock.advance(seconds=2)
        again = lane.claim_one("worker-b")  # the lease lapsed: claimed again
        record = StepRecord(
            run_id=job.run_id, name="late", status="completed", started_at=clock.now()
        )
        with pytest.raises(JobsError) as refused:
            driver.steps.put(record, _fence(job))
        assert refused.value.code == "X_JOB_LEASE_LOST"
        driver.cancel(again.id)
        with pytest.raises(JobsError) as cancelled:
            driver.steps.put(record, _fence(again))
        assert cancelled.value.code == "X_JOB_LEASE_LOST"
        assert driver.steps.list(job.run_id) == {}

    def test_an_event_published_after_a_wait_began_is_its_match(
        self, lane: Lane, driver: JobDriver
    ) -> None:
        """``find`` answers the first event of the wait's name and key."""
        event = f"{lane.job}.approved"
        lane.enqueue()
        job = lane.claim_one()
        step = _waiting(driver, job, event, key="42")
        assert driver.events.find(step) is None
        driver.events.publish(event, {"by": "other"}, "41", TTL_MS)
        driver.events.publish(f"{event}.not", {"by": "x"}, "42", TTL_MS)
        assert driver.events.find(step) is None
        published = driver.events.publish(event, {"by": "ada"}, "42", TTL_MS)
        driver.events.publish(event, {"by": "late"}, "42", TTL_MS)
        found = driver.events.find(step)
        assert found is not None and found.id == published.id
        assert (found.payload, found.correlation_key) == ({"by": "ada"}, "42")
        assert found.expires_at == published.published_at + timedelta(
            milliseconds=TTL_MS
        )

    def test_a_parked_run_whose_event_came_first_is_made_due(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """``wake_waiting`` wakes a suspended run an event already matches, once."""
        event = f"{lane.job}.paid"
        lane.enqueue()
        job = lane.claim_one()
        _waiting(driver, job, event, key=None)
        driver.events.publish(event, {"paid": 5}, None, TTL_MS)  # the run still runs
        deadline = clock.now() + timedelta(hours=1)
        assert lane.nack(job, park=True, run_at=deadline, counts_as_attempt=False)
        assert lane.row(job.id).state == JobState.SUSPENDED
        assert lane.row(job.id).run_at == deadline
        assert driver.events.wake_waiting(job.id, "wait") is True
        assert lane.row(job.id).run_at == clock.now()
        assert driver.events.wake_waiting(job.id, "wait") is False  # due already
        assert driver.events.wake_waiting(job.id, "no-such-step") is False

    def test_a_publish_wakes_the_runs_parked_on_it(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """A suspended run waiting for the event (any key, or its own) is due at once."""
        event = f"{lane.job}.shipped"
        lane.enqueue()
        job = lane.claim_one()
        _waiting(driver, job, event, key="7")
        deadline = clock.now() + timedelta(hours=1)
        assert lane.nack(job, park=True, run_at=deadline, counts_as_attempt=False)
        driver.events.publish(event, {}, "8", TTL_MS)
        assert lane.row(job.id).run_at == deadline  # another key
        clock.advance(seconds=1)
        driver.events.publish(event, {}, "7", TTL_MS)
        assert lane.row(job.id).run_at == clock.now()

    def test_expired_events_are_purged_and_never_matched(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """Past its ttl an event matches no wait, and ``purge_expired`` deletes it."""
        event = f"{lane.job}.brief"
        lane.enqueue()
        job = lane.claim_one()
        step = _waiting(driver, job, event, key=None)
        driver.events.publish(event, {"n": 1}, None, 1_000)
        kept = driver.events.publish(event, {"n": 2}, None, 10_000)
        clock.advance(seconds=1)
        found: Any = driver.events.find(step)
        assert found is not None and found.id == kept.id
        assert driver.events.purge_expired() == 1
        clock.advance(seconds=9)
        assert driver.events.find(step) is None
        assert driver.events.purge_expired() == 1

    def test_events_are_listed_newest_first_with_the_waits_that_took_them(
        self, lane: Lane, driver: JobDriver, clock: ManualClock
    ) -> None:
        """``listing`` answers the newest events (of a name), each with the
        completed waits whose ``cursor_id`` is its id."""
        event = f"{lane.job}.listed"
        lane.enqueue()
        job = lane.claim_one()
        step = _waiting(driver, job, event, key="k")
        first = driver.events.publish(event, {"n": 1}, "k", TTL_MS)
        clock.advance(seconds=1)
        second = driver.events.publish(event, {"n": 2}, None, TTL_MS)
        other = driver.events.publish(f"{event}.other", {}, None, TTL_MS)
        found: Any = driver.events.find(step)
        assert found is not None and found.id == first.id
        taken = replace(
            step,
            status="completed",
            output=found.payload,
            completed_at=clock.now(),
            cursor_at=found.published_at,
            cursor_id=found.id,
        )
        driver.steps.put(taken, _fence(job))
        listed = driver.events.listing(name=event, limit=10)
        assert [entry.event.id for entry in listed] == [second.id, first.id]
        assert [entry.matched for entry in listed] == [
            (),
            (MatchedWait(job.run_id, "wait"),),
        ]
        oldest = listed[1].event
        assert (oldest.name, oldest.payload, oldest.correlation_key) == (
            event,
            {"n": 1},
            "k",
        )
        assert oldest.published_at == first.published_at
        assert oldest.expires_at == first.expires_at
        newest = driver.events.listing(name=event, limit=1)
        assert [entry.event.id for entry in newest] == [second.id]
        every = [e.event.id for e in driver.events.listing(name=None, limit=200)]
        assert every.index(other.id) < every.index(second.id) < every.index(first.id)
        assert driver.events.listing(name=f"{event}.none", limit=10) == []
