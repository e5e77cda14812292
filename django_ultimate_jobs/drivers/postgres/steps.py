"""Steps and events in PostgreSQL (``driver.steps``, ``driver.events``)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import connections, transaction

from ...errors import JobLeaseLost, JobRowStatusUnknown
from ...ids import monotonic_uuid7
from ..steps import (
    STEP_STATUSES,
    EventListing,
    EventRecord,
    MatchedWait,
    StepFence,
    StepRecord,
    WaitMark,
)
from .jsonb import dumps as _dumps
from .jsonb import loads as _loads
from .rows import EVENT_COLUMNS, STEP_COLUMNS, named, scalar

if TYPE_CHECKING:
    from .driver import PostgresDriver

__all__ = ["PostgresEvents", "PostgresSteps"]

logger = logging.getLogger("django_ultimate_jobs")


class PostgresSteps:
    """Step records in ``ultimate_jobs_step``."""

    def __init__(self, driver: PostgresDriver) -> None:
        self.driver = driver

    def list(self, run_id: UUID) -> dict[str, StepRecord]:
        """Every step of ``run_id`` by name."""
        records = {}
        for row in self.driver._rows("step_list", {"run_id": run_id}):
            step = named(STEP_COLUMNS, row)
            if step["status"] not in STEP_STATUSES:
                # Never read an unknown status as "not completed": that
                # would run a completed step again.
                raise JobRowStatusUnknown(
                    f"step {step['name']!r} is in status {step['status']!r}, which "
                    "this version does not know",
                    meta={"status": step["status"]},
                )
            step["output"] = _loads(step["output"])
            records[step["name"]] = StepRecord(run_id=run_id, **step)
        return records

    def put(self, record: StepRecord, fence: StepFence | None) -> None:
        """Write ``record`` for the attempt behind ``fence``.

        Raises:
            JobLeaseLost: the attempt no longer holds the job.
        """
        if fence is None:
            raise ValueError("step writes of an attempt are always fenced")
        rows = self.driver._rows(
            "step_put",
            {
                "job_id": fence.job_id,
                "worker": fence.identity.worker_id,
                "claim": fence.identity.claim,
                "run_id": record.run_id,
                "name": record.name,
                "status": record.status,
                "output": None if record.output is None else _dumps(record.output),
                "error": record.error,
                "started_at": record.started_at,
                "completed_at": record.completed_at,
                "wake_at": record.wake_at,
                "event": record.event,
                "key": record.correlation_key,
                "snapshot": record.snapshot,
                "cursor_at": record.cursor_at,
                "cursor_id": record.cursor_id,
            },
        )
        if not rows:
            raise JobLeaseLost(
                f"step {record.name!r} was not recorded: this attempt no longer "
                "holds the job (cancelled or re-claimed)"
            )


class PostgresEvents:
    """Events in ``ultimate_jobs_event``, matched by snapshot (see event_find)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self.driver = driver

    def mark(self) -> WaitMark:
        """The snapshot and statement time a new wait begins under."""
        ((snapshot, at),) = self.driver._rows("event_mark", {})
        return WaitMark(snapshot, at)

    def publish(
        self, name: str, payload: Any, key: str | None, ttl_ms: int
    ) -> EventRecord:
        """Insert the event on the caller's connection and wake its waiters.

        Inside ``transaction.atomic()`` the event commits or rolls back with
        the caller, and the wake runs again after the commit.
        """
        # Monotonic: events of one millisecond (one frozen clock) are
        # matched in publish order, (published_at, id).
        event_id = monotonic_uuid7()
        text = _dumps(payload)
        ((published_id, published_at, expires_at, _woken),) = self.driver._rows(
            "event_publish",
            {
                "id": event_id,
                "event": name,
                "payload": text,
                "key": key,
                "ttl_ms": ttl_ms,
            },
        )
        connection = connections[self.driver.using]
        if connection.in_atomic_block:
            transaction.on_commit(
                lambda: self._wake_after_commit(name, key), using=self.driver.using
            )
        return EventRecord(
            id=published_id,
            name=name,
            payload=json.loads(text),
            correlation_key=key,
            published_at=published_at,
            expires_at=expires_at,
        )

    def _wake_after_commit(self, name: str, key: str | None) -> None:
        try:
            self.driver._rows("event_wake", {"event": name, "key": key})
        except Exception:
            # A hint only: the waiters' backstop poll still finds the event.
            logger.warning("jobs.event.commit-wake-failed", exc_info=True)

    def find(self, step: StepRecord) -> EventRecord | None:
        """The first event the waiting ``step`` matches."""
        rows = self.driver._rows(
            "event_find",
            {
                "event": step.event,
                "key": step.correlation_key,
                "snapshot": step.snapshot,
                "started_at": step.started_at,
                "cursor_at": step.cursor_at,
                "cursor_id": step.cursor_id,
            },
        )
        if not rows:
            return None
        event = named(EVENT_COLUMNS, rows[0])
        event["payload"] = _loads(event["payload"])
        return EventRecord(**event)

    def wake_waiting(self, job_id: UUID, step: str) -> bool:
        """Make a job parked on ``step`` due now if an event already matches."""
        return bool(self.driver._rows("job_wake_waiting", {"id": job_id, "step": step}))

    def purge_expired(self) -> int:
        """Delete expired events; answers how many."""
        return int(scalar(self.driver._rows("event_purge", {})))

    def listing(self, *, name: str | None, limit: int) -> list[EventListing]:
        """The newest ``limit`` events (of ``name``), each with its matched waits."""
        events = []
        for row in self.driver._rows("event_list", {"event": name, "limit": limit}):
            event = named(EVENT_COLUMNS, row)
            event["payload"] = _loads(event["payload"])
            events.append(EventRecord(**event))
        matched: dict[UUID, list[MatchedWait]] = {}
        if events:
            ids = [event.id for event in events]
            for event_id, run_id, step in self.driver._rows(
                "event_matched_waits", {"ids": ids}
            ):
                matched.setdefault(event_id, []).append(MatchedWait(run_id, step))
        return [
            EventListing(event, tuple(matched.get(event.id, ()))) for event in events
        ]
