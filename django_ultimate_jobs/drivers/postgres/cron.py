"""Cron tasks, the leader lease and task pauses in PostgreSQL (``driver.cron``).

Each method is one named statement through the driver's ``_rows``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING

from ...ids import uuid7
from ..base import PausedName
from ..cron import FireResult, TaskArm, TaskFire, TaskRecord
from .jsonb import dumps as _dumps

if TYPE_CHECKING:
    from .driver import PostgresDriver

__all__ = ["PostgresCron"]

_RECORD_FIELDS = [f.name for f in fields(TaskRecord)]


class PostgresCron:
    """The Postgres driver's cron store (``driver.cron``)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self.driver = driver

    def task_sync(self, tasks: Sequence[TaskArm]) -> dict[str, datetime]:
        """Answer each task's watermark, arming the new ones (one statement)."""
        if not tasks:
            return {}
        rows = [
            {
                "name": t.name,
                "cron": t.cron,
                "tz": t.tz,
                "watermark": t.watermark.isoformat(),
                "next_run_at": t.next_run_at.isoformat() if t.next_run_at else None,
            }
            for t in tasks
        ]
        return dict(self.driver._rows("cron_task_sync", {"tasks": _dumps(rows)}))

    def task_fire(self, fire: TaskFire) -> FireResult | None:
        """Fire one occurrence; ``None`` when another fire moved the watermark."""
        rows = [
            {
                "ord": index,
                "id": str(uuid7()),
                "name": r.name,
                "queue": r.queue,
                "input": r.input,
                "idempotency_key": r.idempotency_key,
                "max_attempts": r.max_attempts,
                "priority": r.priority,
                "run_at": r.run_at.isoformat() if r.run_at else None,
                "tenant_id": r.tenant_id,
                "enqueued_by": r.enqueued_by,
                "traceparent": r.traceparent,
                "concurrency_key": r.concurrency_key,
                "concurrency_limit": r.concurrency_limit,
            }
            for index, r in enumerate(fire.jobs)
        ]
        answer = self.driver._rows(
            "cron_task_fire",
            {
                "name": fire.name,
                "expected": fire.expected,
                "watermark": fire.watermark,
                "occurrence": fire.occurrence,
                "next_run_at": fire.next_run_at,
                "rows": _dumps(rows),
            },
        )
        if not answer:
            return None
        inserted = [job_id for job_id, _notified in answer if job_id is not None]
        return FireResult(inserted, len(rows) - len(inserted))

    def task_list(self) -> list[TaskRecord]:
        """Every stored task with its pause, sorted by name."""
        # cron_task_list selects the record's fields in declaration order.
        return [
            TaskRecord(**dict(zip(_RECORD_FIELDS, row, strict=True)))
            for row in self.driver._rows("cron_task_list", {})
        ]

    def leader_acquire(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        """Take or renew the lease ``key``; True if ``holder`` now leads."""
        return bool(
            self.driver._rows(
                "leader_acquire", {"key": key, "holder": holder, "ttl_ms": ttl_ms}
            )
        )

    def leader_release(self, key: str, holder: str) -> None:
        """Give up the lease ``key`` if ``holder`` holds it."""
        self.driver._rows("leader_release", {"key": key, "holder": holder})

    def pause_task(self, task: str) -> list[PausedName]:
        """Pause a cron task; answers the paused tasks after the write."""
        return self.driver._pause("task", task)

    def resume_task(self, task: str) -> list[PausedName]:
        """Resume a cron task; answers the paused tasks after the write."""
        self.driver._rows("task_resume", {"name": task})
        return self.paused_tasks()

    def paused_tasks(self) -> list[PausedName]:
        """Paused tasks sorted by name."""
        return self.driver._paused("task")
