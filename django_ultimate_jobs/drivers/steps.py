"""The step and event stores: records and protocols (internal, like ``base``).

Steps live with the queue (``driver.steps``); events with it too
(``driver.events``). Every step write of an attempt is fenced on the
attempt's claim, exactly like a settle: a write whose fence fails raises
``X_JOB_LEASE_LOST`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from ..errors import StepNotFound
from .base import ClaimIdentity

__all__ = [
    "STEP_STATUSES",
    "EventListing",
    "EventRecord",
    "EventStore",
    "MatchedWait",
    "StepFence",
    "StepRecord",
    "StepStore",
    "WaitMark",
    "step_not_found",
]

STEP_STATUSES = frozenset({"completed", "sleeping", "waiting", "failed"})


@dataclass(frozen=True, slots=True)
class StepFence:
    """The attempt a step write belongs to."""

    job_id: UUID
    identity: ClaimIdentity


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRecord:
    """One step of a run, as stored."""

    run_id: UUID
    name: str
    status: str
    started_at: datetime
    output: Any = None
    error: str | None = None
    attempts: int = 1
    completed_at: datetime | None = None
    wake_at: datetime | None = None
    """A sleep's wake time, or a wait's deadline."""
    event: str | None = None
    correlation_key: str | None = None
    snapshot: str | None = None
    """The database snapshot a wait began under."""
    cursor_at: datetime | None = None
    cursor_id: UUID | None = None
    """A waiting step: the last event it refused (later ones only). A
    completed wait: the event it took (what the events page lists as the
    event's matched waits)."""


@dataclass(frozen=True, slots=True)
class WaitMark:
    """Where a wait begins: the snapshot and the database time."""

    snapshot: str
    at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class EventRecord:
    """A published event."""

    id: UUID
    name: str
    payload: Any
    correlation_key: str | None
    published_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class MatchedWait:
    """A wait that took an event: its run and its step's name."""

    run_id: UUID
    step: str


@dataclass(frozen=True, slots=True)
class EventListing:
    """A stored event, with the waits that took it (run, then step order)."""

    event: EventRecord
    matched: tuple[MatchedWait, ...] = ()


class StepStore(Protocol):
    """Durable step records of runs."""

    def list(self, run_id: UUID) -> dict[str, StepRecord]:
        """Every step of ``run_id`` by name (one statement).

        Raises:
            JobRowStatusUnknown: a stored status this build does not know.
        """
        ...

    def put(self, record: StepRecord, fence: StepFence | None) -> None:
        """Insert or replace a step; with a fence, only for the holding attempt.

        Raises:
            JobLeaseLost: the fence failed; nothing was written.
        """
        ...


class EventStore(Protocol):
    """Published events and the waits that match them."""

    def mark(self) -> WaitMark:
        """The snapshot and time a new wait begins under."""
        ...

    def publish(
        self, name: str, payload: Any, key: str | None, ttl_ms: int
    ) -> EventRecord:
        """Store an event (in the caller's transaction) and wake its waiters."""
        ...

    def find(self, step: StepRecord) -> EventRecord | None:
        """The first event (``published_at``, id) the waiting ``step`` matches."""
        ...

    def wake_waiting(self, job_id: UUID, step: str) -> bool:
        """Make a job parked on ``step`` due now if an event already matches."""
        ...

    def purge_expired(self) -> int:
        """Delete expired events; answers how many."""
        ...

    def listing(self, *, name: str | None, limit: int) -> list[EventListing]:
        """The stored events, newest first (publish order), at most ``limit``.

        ``name`` narrows them to one event name. Expired events are listed
        until the retention sweep purges them. Each carries the waits that
        took it (a completed wait's ``cursor_id``).
        """
        ...


def step_not_found(
    job_id: UUID, step: str, records: Iterable[StepRecord]
) -> StepNotFound:
    """The refusal of a requeue from a step the job's run never recorded.

    Names the run's steps, in the order they started, in the message and
    in ``meta["steps"]``.
    """
    names = [r.name for r in sorted(records, key=lambda r: (r.started_at, r.name))]
    listed = ", ".join(map(repr, names)) if names else "none"
    return StepNotFound(
        f"the job has no step named {step!r}; its steps: {listed}",
        fix=f"python manage.py jobs retry {job_id} --from-step <one of its steps>",
        meta={"id": str(job_id), "step": step, "steps": names},
    )
