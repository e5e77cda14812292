"""Cron tasks, the leader lease and task pauses in memory (``driver.cron``).

The answers of the statements in ``drivers/postgres/cron.py``: a fire lands
only while the stored watermark equals the one the scheduler read, and
inserts the occurrence's jobs under the driver's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..base import PausedName
from ..cron import FireResult, TaskArm, TaskFire, TaskRecord
from .rows import JobRow, dump_json

if TYPE_CHECKING:
    from .driver import MemoryDriver

__all__ = ["MemoryCron"]


class MemoryCron:
    """The memory driver's cron store (``driver.cron``)."""

    def __init__(self, driver: MemoryDriver) -> None:
        self.driver = driver
        self.forget()

    def forget(self) -> None:
        """Drop every task and task pause (the driver's ``close()``)."""
        self._tasks: dict[str, TaskRecord] = {}
        self._paused_tasks: dict[str, datetime] = {}

    def task_sync(self, tasks: Sequence[TaskArm]) -> dict[str, datetime]:
        """Answer each task's watermark, arming the new ones (schedules updated)."""
        with self.driver._lock:
            for task in tasks:
                stored = self._tasks.get(task.name)
                if stored is None:
                    stored = TaskRecord(
                        name=task.name,
                        cron=task.cron,
                        tz=task.tz,
                        watermark=task.watermark,
                        last_occurrence=None,
                        fired_at=None,
                        next_run_at=task.next_run_at,
                        paused_at=None,
                    )
                elif (stored.cron, stored.tz) != (task.cron, task.tz):
                    # A changed schedule is recorded; the watermark stays.
                    stored = replace(
                        stored, cron=task.cron, tz=task.tz, next_run_at=task.next_run_at
                    )
                self._tasks[task.name] = stored
            return {t.name: self._tasks[t.name].watermark for t in tasks}

    def task_fire(self, fire: TaskFire) -> FireResult | None:
        """Fire one occurrence; ``None`` when another fire moved the watermark."""
        texts = [dump_json(r.input) for r in fire.jobs]
        now = self.driver._now()
        inserted: list[JobRow] = []
        with self.driver._lock:
            stored = self._tasks.get(fire.name)
            if (
                stored is None
                or stored.watermark != fire.expected
                or stored.watermark >= fire.occurrence
            ):
                return None
            self._tasks[fire.name] = replace(
                stored,
                watermark=fire.watermark,
                last_occurrence=fire.occurrence,
                fired_at=now,
                next_run_at=fire.next_run_at,
            )
            for request, text in zip(fire.jobs, texts, strict=True):
                _answer, row = self.driver._insert(request, text, now)
                if row is not None:
                    inserted.append(row)
        self.driver._wake(
            row.queue for row in inserted if row.run_at <= now + timedelta(seconds=1)
        )
        return FireResult([row.id for row in inserted], len(texts) - len(inserted))

    def task_list(self) -> list[TaskRecord]:
        """Every stored task with its pause, sorted by name."""
        with self.driver._lock:
            return [
                replace(task, paused_at=self._paused_tasks.get(name))
                for name, task in sorted(self._tasks.items())
            ]

    def leader_acquire(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        """Take or renew the lease ``key``; True if ``holder`` now leads."""
        now = self.driver._now()
        with self.driver._lock:
            return self.driver._lease_table.lead(key, holder, ttl_ms, now)

    def leader_release(self, key: str, holder: str) -> None:
        """Give up the lease ``key`` if ``holder`` holds it."""
        with self.driver._lock:
            self.driver._lease_table.resign(key, holder)

    def pause_task(self, task: str) -> list[PausedName]:
        """Pause a cron task (the first pause's time is kept)."""
        now = self.driver._now()
        with self.driver._lock:
            self._paused_tasks.setdefault(task, now)
        return self.paused_tasks()

    def resume_task(self, task: str) -> list[PausedName]:
        """Resume a cron task; answers the paused tasks after the write."""
        with self.driver._lock:
            self._paused_tasks.pop(task, None)
        return self.paused_tasks()

    def paused_tasks(self) -> list[PausedName]:
        """Paused tasks sorted by name (code-point order)."""
        with self.driver._lock:
            return [PausedName(n, at) for n, at in sorted(self._paused_tasks.items())]
