"""The maintenance role of the driver contract (``driver.maintenance``).

What the retention sweep (``maintenance/retention.py``) and the worker's
counter roll-up delete or fold in job storage. The sweep owns the policy
(which windows, which batch size, the order of targets, the log lines);
the store owns the deletes. Each purge is ONE batch of at most ``limit``
rows, committed on its own where the store has transactions, so a sweep
never holds a lock across batches; the sweep calls again until a batch
comes back short. Both drivers delete the same rows (the conformance suite
holds them to it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, Protocol

__all__ = [
    "COUNTER_HOURS_KEPT",
    "FINISHED_KINDS",
    "FinishedKind",
    "MaintenanceStore",
]

FinishedKind = Literal["done", "failed"]
"""``"done"``: jobs that succeeded; ``"failed"``: failed, dead and cancelled."""
FINISHED_KINDS: tuple[FinishedKind, ...] = ("done", "failed")
COUNTER_HOURS_KEPT = timedelta(days=30)
"""1-hour counter buckets older than this are dropped (the last tier)."""


class MaintenanceStore(Protocol):
    """``driver.maintenance``: retention purges and the counter roll-up."""

    def purge_jobs(
        self, kind: FinishedKind, before: datetime, *, limit: int
    ) -> tuple[int, int]:
        """Delete up to ``limit`` finished jobs last written before ``before``,
        oldest first, with every step of their runs (one batch).

        Answers ``(jobs, steps)`` deleted. Live rows are never touched, and
        a row another writer holds right now is left to the next batch.
        """
        ...

    def purge_events(self, now: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` events expired at ``now``, oldest expiry first."""
        ...

    def purge_locks(self, before: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` lock rows (lease keys ``lock:...``) that
        lapsed before ``before``; job slots and the leader lease stay."""
        ...

    def drop_counters(self, now: datetime) -> int:
        """Delete the 1-hour counter buckets older than
        :data:`COUNTER_HOURS_KEPT` at ``now``; answers how many."""
        ...

    def rollup_counters(self) -> int:
        """Fold counter tiers as of the driver's clock: 1-minute buckets past
        24 h into 5-minute ones, 5-minute past 7 days into hours, hours past
        30 days dropped; answers how many buckets moved."""
        ...
