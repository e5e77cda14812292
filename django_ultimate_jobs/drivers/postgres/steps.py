"""Steps and events in PostgreSQL (``driver.steps``, ``driver.events``)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import connections, transaction

from ...errors import JobLeaseLost, JobRowStatusUnknown
from ...ids import uuid7
from ..steps import STEP_STATUSES, EventRecord, StepFence, StepRecord, WaitMark
from .jsonb import dumps as _dumps
from .jsonb import loads as _loads

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
            if row[1] not in STEP_STATUSES:
                # Never read an unknown status as "not completed": that
                # would run a completed step again.
                raise JobRowStatusUnknown(
                    f"step {row[0]!r} is in status {row[1]!r}, which this version "
                    "does not know",
                    meta={"status": row[1]},
                )
            records[row[0]] = StepRecord(
                run_id=run_id,
                name=row[0],
                status=row[1],
                output=_loads(row[2]),
                error=row[3],
                attempts=row[4],
                started_at=row[5],
                completed_at=row[6],
                wake_at=row[7],
                event=row[8],
                correlation_key=row[9],
                snapshot=row[10],
                cursor_at=row[11],
                cursor_id=row[12],
            )
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
        snapshot, at = self.driver._rows("event_mark", {})[0]
        return WaitMark(snapshot, at)

    def publish(
        self, name: str, payload: Any, key: str | None, ttl_ms: int
    ) -> EventRecord:
        """Insert the event on the caller's connection and wake its waiters.

        Inside ``transaction.atomic()`` the event commits or rolls back with
        the caller, and the wake runs again after the commit.
        """
        event_id = uuid7()
        text = _dumps(payload)
        row = self.driver._rows(
            "event_publish",
            {
                "id": event_id,
                "event": name,
                "payload": text,
                "key": key,
                "ttl_ms": ttl_ms,
            },
        )[0]
        connection = connections[self.driver.using]
        if connection.in_atomic_block:
            transaction.on_commit(
                lambda: self._wake_after_commit(name, key), using=self.driver.using
            )
        return EventRecord(
            id=row[0],
            name=name,
            payload=json.loads(text),
            correlation_key=key,
            published_at=row[1],
            expires_at=row[2],
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
        row = rows[0]
        return EventRecord(
            id=row[0],
            name=row[1],
            payload=_loads(row[2]),
            correlation_key=row[3],
            published_at=row[4],
            expires_at=row[5],
        )

    def wake_waiting(self, job_id: UUID, step: str) -> bool:
        """Make a job parked on ``step`` due now if an event already matches."""
        return bool(self.driver._rows("job_wake_waiting", {"id": job_id, "step": step}))

    def purge_expired(self) -> int:
        """Delete expired events; answers how many."""
        return int(self.driver._rows("event_purge", {})[0][0])
