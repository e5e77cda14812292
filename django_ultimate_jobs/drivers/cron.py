"""The cron role of the driver contract (``driver.cron``): records and protocol.

The scheduler speaks to ``driver.cron`` through four calls: ``task_sync``
(read the watermarks, arming new tasks), ``task_fire`` (the atomic, fenced
fire), ``leader_acquire``/``leader_release`` (the leader lease), plus the
pause verbs and ``task_list`` for operators. Both drivers implement them
with the same answers; the conformance suite holds them to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from .base import EnqueueRequest, PausedName

__all__ = [
    "SCHEDULER_LEASE_KEY",
    "CronStore",
    "FireResult",
    "TaskArm",
    "TaskFire",
    "TaskRecord",
]

SCHEDULER_LEASE_KEY = "ultimate_jobs:scheduler"


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskArm:
    """A declared task, with the watermark it gets if it is new."""

    name: str
    cron: str
    tz: str
    watermark: datetime
    next_run_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskFire:
    """One occurrence to fire, fenced on the watermark the scheduler read."""

    name: str
    expected: datetime
    """The stored watermark as read; the fire lands only if it is unchanged."""
    watermark: datetime
    """The new watermark: the occurrence, or later (run-once drops the rest)."""
    occurrence: datetime
    next_run_at: datetime | None
    jobs: Sequence[EnqueueRequest]
    """Validated requests, each with its ``<task>:<occurrence>:<key>`` key."""


@dataclass(frozen=True, slots=True)
class FireResult:
    """A fire that landed: the jobs it inserted, and how many met a live key."""

    inserted: list[UUID]
    deduped: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRecord:
    """A stored cron task as the operator listing sees it."""

    name: str
    cron: str
    tz: str
    watermark: datetime
    last_occurrence: datetime | None
    fired_at: datetime | None
    next_run_at: datetime | None
    paused_at: datetime | None


class CronStore(Protocol):
    """``driver.cron``: cron tasks, their pauses and the scheduler's leader lease."""

    def task_sync(self, tasks: Sequence[TaskArm]) -> dict[str, datetime]:
        """Answer each task's watermark, arming new tasks at the one given."""
        ...

    def task_fire(self, fire: TaskFire) -> FireResult | None:
        """Fire one occurrence atomically; ``None`` if the watermark moved."""
        ...

    def task_list(self) -> list[TaskRecord]:
        """Every stored cron task with its pause, sorted by name."""
        ...

    def pause_task(self, task: str) -> list[PausedName]:
        """Pause a cron task (skipped when due, watermark untouched)."""
        ...

    def resume_task(self, task: str) -> list[PausedName]:
        """Resume a cron task; answers the paused tasks after the write."""
        ...

    def paused_tasks(self) -> list[PausedName]:
        """Paused cron tasks sorted by name."""
        ...

    def leader_acquire(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        """Take or renew a leader lease; True if ``holder`` now leads."""
        ...

    def leader_release(self, key: str, holder: str) -> None:
        """Give up a leader lease ``holder`` holds."""
        ...
