"""Steps and events in memory, with the Postgres driver's semantics.

There are no concurrent transactions in memory: every publish is committed
at once. A wait's "snapshot" is the event sequence number when it began:
events with a higher number are the ones it owns (published after it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ...errors import JobLeaseLost
from ...ids import monotonic_uuid7
from ...states import JobState
from ..steps import (
    EventListing,
    EventRecord,
    MatchedWait,
    StepFence,
    StepRecord,
    WaitMark,
)

if TYPE_CHECKING:
    from .driver import MemoryDriver

__all__ = ["EventRow", "MemoryEvents", "MemorySteps"]


@dataclass(frozen=True, slots=True)
class EventRow:
    """One stored event: its JSON text and its place in publish order."""

    seq: int
    record: EventRecord
    payload: str


class MemorySteps:
    """Step records of runs, kept as JSON round-trips of their outputs."""

    def __init__(self, driver: MemoryDriver) -> None:
        self.driver = driver

    def list(self, run_id: UUID) -> dict[str, StepRecord]:
        """Every step of ``run_id`` by name."""
        with self.driver._lock:
            return dict(self.driver._steps.get(run_id, {}))

    def put(self, record: StepRecord, fence: StepFence | None) -> None:
        """Write ``record`` for the attempt behind ``fence``.

        Raises:
            JobLeaseLost: the attempt no longer holds the job.
        """
        stored = _round_trip(record)
        driver = self.driver
        with driver._lock:
            if fence is not None:
                row = driver._jobs.rows.get(fence.job_id)
                if row is None or not row.owned_by(
                    fence.identity.worker_id, fence.identity.claim
                ):
                    raise JobLeaseLost(
                        f"step {record.name!r} was not recorded: this attempt no "
                        "longer holds the job (cancelled or re-claimed)"
                    )
            steps = driver._steps.setdefault(record.run_id, {})
            earlier = steps.get(record.name)
            if earlier is not None:
                stored = _with_attempts(stored, earlier.attempts + 1)
            steps[record.name] = stored


class MemoryEvents:
    """Published events and the waits that match them."""

    def __init__(self, driver: MemoryDriver) -> None:
        self.driver = driver

    def mark(self) -> WaitMark:
        """A wait begins after the last published event."""
        with self.driver._lock:
            return WaitMark(str(self.driver._event_seq), self.driver._now())

    def publish(
        self, name: str, payload: Any, key: str | None, ttl_ms: int
    ) -> EventRecord:
        """Store an event and make the suspended runs waiting on it due now."""
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        driver = self.driver
        with driver._lock:
            now = driver._now()
            driver._event_seq += 1
            record = EventRecord(
                id=monotonic_uuid7(),
                name=name,
                payload=json.loads(text),
                correlation_key=key,
                published_at=now.replace(microsecond=now.microsecond // 1000 * 1000),
                expires_at=now + timedelta(milliseconds=ttl_ms),
            )
            driver._events.append(EventRow(driver._event_seq, record, text))
            queues = self._wake_locked(name, key, now)
        driver._wake(queues)
        return record

    def find(self, step: StepRecord) -> EventRecord | None:
        """The first event (publish order) the waiting ``step`` matches."""
        with self.driver._lock:
            row = self._first_match(step, self.driver._now())
        if row is None:
            return None
        return _fresh(row)

    def wake_waiting(self, job_id: UUID, step: str) -> bool:
        """Make a job parked on ``step`` due now if an event already matches."""
        driver = self.driver
        with driver._lock:
            row = driver._jobs.rows.get(job_id)
            now = driver._now()
            if row is None or row.state != JobState.SUSPENDED or row.run_at <= now:
                return False
            waiting = driver._steps.get(row.run_id, {}).get(step)
            if waiting is None or waiting.status != "waiting":
                return False
            if self._first_match(waiting, now) is None:
                return False
            row.run_at = now
            queue = row.queue
        driver._wake([queue])
        return True

    def purge_expired(self) -> int:
        """Delete expired events; answers how many."""
        driver = self.driver
        with driver._lock:
            now = driver._now()
            kept = [e for e in driver._events if e.record.expires_at > now]
            purged = len(driver._events) - len(kept)
            driver._events = kept
        return purged

    def listing(self, *, name: str | None, limit: int) -> list[EventListing]:
        """The newest ``limit`` events (of ``name``), each with its matched waits."""
        driver = self.driver
        with driver._lock:
            rows = [
                row
                for row in reversed(driver._events)
                if name is None or row.record.name == name
            ][:limit]
            ids = {row.record.id for row in rows}
            matched: dict[UUID, list[MatchedWait]] = {}
            for run_id, steps in driver._steps.items():
                for step in steps.values():
                    if step.status == "completed" and step.cursor_id in ids:
                        assert step.cursor_id is not None
                        wait = MatchedWait(run_id, step.name)
                        matched.setdefault(step.cursor_id, []).append(wait)
        return [
            EventListing(
                _fresh(row),
                tuple(sorted(matched.get(row.record.id, ()), key=_wait_order)),
            )
            for row in rows
        ]

    def _first_match(self, step: StepRecord, now: datetime) -> EventRow | None:
        seen_at_start = int(step.snapshot or 0)
        for event in self.driver._events:
            record = event.record
            if record.name != step.event or record.expires_at <= now:
                continue
            if (
                step.correlation_key is not None
                and record.correlation_key != step.correlation_key
            ):
                continue
            if event.seq <= seen_at_start and record.published_at < step.started_at:
                continue
            if step.cursor_at is not None and (record.published_at, record.id.int) <= (
                step.cursor_at,
                (step.cursor_id or UUID(int=0)).int,
            ):
                continue
            return event
        return None

    def _wake_locked(self, name: str, key: str | None, now: datetime) -> list[str]:
        queues = []
        driver = self.driver
        for run_id, steps in driver._steps.items():
            for step in steps.values():
                if step.status != "waiting" or step.event != name:
                    continue
                if step.correlation_key is not None and step.correlation_key != key:
                    continue
                for row in driver._jobs.rows.values():
                    if (
                        row.run_id == run_id
                        and row.state == JobState.SUSPENDED
                        and row.run_at > now
                    ):
                        row.run_at = now
                        queues.append(row.queue)
        return queues


def _fresh(row: EventRow) -> EventRecord:
    record = row.record
    return EventRecord(
        id=record.id,
        name=record.name,
        payload=json.loads(row.payload),
        correlation_key=record.correlation_key,
        published_at=record.published_at,
        expires_at=record.expires_at,
    )


def _wait_order(wait: MatchedWait) -> tuple[str, str]:
    return (str(wait.run_id), wait.step)


def _round_trip(record: StepRecord) -> StepRecord:
    output = record.output
    if output is not None:
        output = json.loads(json.dumps(output, allow_nan=False))
    return _replace(record, output=output, attempts=1)


def _with_attempts(record: StepRecord, attempts: int) -> StepRecord:
    return _replace(record, attempts=attempts)


def _replace(record: StepRecord, **changes: Any) -> StepRecord:
    from dataclasses import replace

    return replace(record, **changes)
