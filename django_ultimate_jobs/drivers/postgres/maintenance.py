"""Retention purges and the counter roll-up in PostgreSQL (``driver.maintenance``).

The purges are the batch statements of ``sql/maintenance.sql``: each call
is one batch in its own short transaction (a savepoint inside an outer
``atomic()``, as in tests), picking rows through the partial indexes that
hold only finished rows, SKIP LOCKED, so the claim path never reads what a
sweep reads nor waits on what it locks. The roll-up folds the counter tiers
with the statements of ``sql/queries.sql``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from ..maintenance import FinishedKind
from .rows import scalar
from .sql import query

if TYPE_CHECKING:
    from .driver import PostgresDriver

__all__ = ["PostgresMaintenance", "delete_batch", "delete_in_batches"]

_JOB_PURGES: dict[FinishedKind, str] = {
    "done": "job_retention_done",
    "failed": "job_retention_failed",
}
_ROLLUP = ("counter_drop_hours", "counter_fold_fives", "counter_fold_minutes")
"""Oldest tier first, so a bucket folded into the next tier is never folded
again in the same call."""


class PostgresMaintenance:
    """The Postgres driver's maintenance store (``driver.maintenance``)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self.driver = driver

    def purge_jobs(
        self, kind: FinishedKind, before: datetime, *, limit: int
    ) -> tuple[int, int]:
        """One batch of ``job_retention_done`` / ``job_retention_failed``."""
        return delete_batch(
            self.driver.using, _JOB_PURGES[kind], {"before": before}, limit
        )

    def purge_events(self, now: datetime, *, limit: int) -> int:
        """One batch of ``event_retention``."""
        events, _ = delete_batch(
            self.driver.using, "event_retention", {"now": now}, limit
        )
        return events

    def purge_locks(self, before: datetime, *, limit: int) -> int:
        """One batch of ``lock_lease_retention``."""
        locks, _ = delete_batch(
            self.driver.using, "lock_lease_retention", {"before": before}, limit
        )
        return locks

    def drop_counters(self, now: datetime) -> int:
        """``counter_drop_hours`` as of ``now``, in its own transaction."""
        using = self.driver.using
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            cursor.execute(query("counter_drop_hours"), {"now": now})
            return int(scalar(cursor.fetchall()))

    def rollup_counters(self) -> int:
        """Fold counter tiers; answers how many buckets moved."""
        return sum(int(scalar(self.driver._rows(name, {}))) for name in _ROLLUP)


def delete_batch(
    using: str, name: str, params: dict[str, Any], batch: int
) -> tuple[int, int]:
    """Run the batch statement ``name`` of ``maintenance.sql`` once, in its own
    transaction on ``using``; answers ``(rows, dependent rows)`` deleted."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(query(name, "maintenance.sql"), {**params, "batch": batch})
        rows, dependent = cursor.fetchone()
    return int(rows), int(dependent)


def delete_in_batches(
    using: str, name: str, params: dict[str, Any], batch: int
) -> Iterator[tuple[int, int]]:
    """Run the batch statement ``name`` until a batch comes back short.

    Each batch is its own transaction, committed before it is yielded as
    ``(rows, dependent rows)``, so a caller can time it (the bench does)
    and the sweep never holds a lock across batches. Inside an outer
    ``atomic()`` (tests) each batch is a savepoint instead.
    """
    while True:
        rows, dependent = delete_batch(using, name, params, batch)
        yield rows, dependent
        if rows < batch:
            return
