"""Retention purges and the counter roll-up in memory (``driver.maintenance``).

The answers of the batch statements in ``drivers/postgres/sql/maintenance.sql``
and of the counter folds: the same rows go, oldest first, at most ``limit``
per call. One lock acquire per call, as a statement is one snapshot.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ...states import JobState
from ..maintenance import COUNTER_HOURS_KEPT, FinishedKind
from .rows import fold_counters

if TYPE_CHECKING:
    from .driver import MemoryDriver

__all__ = ["MemoryMaintenance"]

_HOUR_MS = 3_600_000
_FINISHED: dict[FinishedKind, frozenset[str]] = {
    "done": frozenset({JobState.DONE.value}),
    "failed": frozenset(
        {JobState.FAILED.value, JobState.DEAD.value, JobState.CANCELLED.value}
    ),
}


class MemoryMaintenance:
    """The memory driver's maintenance store (``driver.maintenance``)."""

    def __init__(self, driver: MemoryDriver) -> None:
        self.driver = driver

    def purge_jobs(
        self, kind: FinishedKind, before: datetime, *, limit: int
    ) -> tuple[int, int]:
        """Up to ``limit`` finished rows written before ``before``, with their steps."""
        driver = self.driver
        states = _FINISHED[kind]
        with driver._lock:
            expired = sorted(
                (
                    row
                    for row in driver._jobs.rows.values()
                    if row.state in states and row.updated_at < before
                ),
                key=lambda row: row.updated_at,
            )[:limit]
            steps = 0
            for row in expired:
                driver._jobs.delete(row)
                steps += len(driver._steps.pop(row.run_id, {}))
        return len(expired), steps

    def purge_events(self, now: datetime, *, limit: int) -> int:
        """Up to ``limit`` events expired at ``now``, oldest expiry first."""
        driver = self.driver
        with driver._lock:
            expired = sorted(
                (e for e in driver._events if e.record.expires_at <= now),
                key=lambda e: e.record.expires_at,
            )[:limit]
            gone = {id(e) for e in expired}
            driver._events = [e for e in driver._events if id(e) not in gone]
        return len(expired)

    def purge_locks(self, before: datetime, *, limit: int) -> int:
        """Up to ``limit`` ``lock:`` rows lapsed before ``before``."""
        driver = self.driver
        with driver._lock:
            table = driver._lease_table
            lapsed = sorted(
                (
                    (row.expires_at, key, slot)
                    for key, slot, row in table.items()
                    if key.startswith("lock:") and row.expires_at < before
                ),
            )[:limit]
            for _, key, slot in lapsed:
                table.delete(key, slot)
        return len(lapsed)

    def drop_counters(self, now: datetime) -> int:
        """The 1-hour buckets older than 30 days at ``now``."""
        driver = self.driver
        cutoff = now - COUNTER_HOURS_KEPT
        with driver._lock:
            old = [
                key
                for key in driver._counters
                if key[1] == _HOUR_MS and key[2] < cutoff
            ]
            for key in old:
                del driver._counters[key]
        return len(old)

    def rollup_counters(self) -> int:
        """Fold counter tiers as of the driver's clock; answers buckets moved."""
        driver = self.driver
        now = driver._now()
        with driver._lock:
            return fold_counters(driver._counters, now)
