"""Retention purges and the counter roll-up on Redis (``driver.maintenance``).

Finished rows are indexed by their last write per queue (``fd`` for done,
``ff`` for failed, dead and cancelled); a purge reads the oldest of every
queue, keeps the ``limit`` oldest overall and deletes them, each queue in
one script that deletes only rows still finished before the cut, with the
steps of their runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ..maintenance import FinishedKind
from .rows import to_us

if TYPE_CHECKING:
    from .leases import RedisLeases
    from .steps import RedisEvents
    from .store import RedisStore

__all__ = ["RedisMaintenance"]

_INDEX: dict[FinishedKind, str] = {"done": "fd", "failed": "ff"}


class RedisMaintenance:
    """The Redis driver's maintenance store (``driver.maintenance``)."""

    def __init__(
        self, store: RedisStore, events: RedisEvents, leases: RedisLeases
    ) -> None:
        self.store = store
        self._events = events
        self._leases = leases

    def purge_jobs(
        self, kind: FinishedKind, before: datetime, *, limit: int
    ) -> tuple[int, int]:
        """Up to ``limit`` finished rows written before ``before``, with their steps."""
        store = self.store
        cut = to_us(before)
        queues = store.queues()
        pipe = store.conn().pipeline(transaction=False)
        for queue in queues:
            key = store.layout.queue(queue) + _INDEX[kind]
            pipe.zrangebyscore(
                key, "-inf", f"({cut}", start=0, num=limit, withscores=True
            )
        oldest = sorted(
            (score, job_id, queue)
            for queue, rows in zip(queues, pipe.execute(), strict=True)
            for job_id, score in rows
        )[:limit]
        by_queue: dict[str, list[str]] = {}
        for _, job_id, queue in oldest:
            by_queue.setdefault(queue, []).append(job_id)
        jobs = steps = 0
        for queue, ids in by_queue.items():
            deleted, with_steps = store.run(
                "verbs",
                store.layout.queue(queue),
                ["purge", store.now_arg(), "", cut, *ids],
            )
            jobs += int(deleted)
            steps += int(with_steps)
        return jobs, steps

    def purge_events(self, now: datetime, *, limit: int) -> int:
        """Up to ``limit`` events expired at ``now``, oldest expiry first."""
        return self._events.purge(now, limit=limit)

    def purge_locks(self, before: datetime, *, limit: int) -> int:
        """Up to ``limit`` ``lock:`` rows lapsed before ``before``."""
        return self._leases.purge_locks(before, limit=limit)

    def _counters(self, verb: str, now: str) -> int:
        store = self.store
        return sum(
            int(store.run("counters", store.layout.queue(queue), [verb, now]))
            for queue in store.queues()
        )

    def drop_counters(self, now: datetime) -> int:
        """The 1-hour buckets older than 30 days at ``now``."""
        return self._counters("drop", str(to_us(now)))

    def rollup_counters(self) -> int:
        """Fold counter tiers as of the driver's clock; answers buckets moved."""
        return self._counters("rollup", self.store.now_arg())
