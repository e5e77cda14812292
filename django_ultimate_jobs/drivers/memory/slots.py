"""Fleet-wide slots of capped jobs, in memory: the lease table's job rows.

The memory driver's twin of what ``job_claim_capped``, ``job_heartbeat_many``
and the settling statements do to ``ultimate_jobs_lease``: a key has
``limit`` numbered slots, a claim takes the lowest free ones (a slot is free
when nobody holds it or its lease expired), a renewal lands only while the
slot is unexpired and still the holder's, and a settle frees only the slot
its own claim holds. Called under the driver's lock; each call reads the
key's own slots only (the table keeps its rows per key).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from .leases import LeaseRow, LeaseTable

__all__ = ["SlotTable"]


class SlotTable:
    """The job slots of one :class:`LeaseTable`: rows keyed ``(key, slot)``.

    Slots and locks share the table and its one fence counter, as they share
    ``ultimate_jobs_lease`` and its sequence on Postgres: ``driver.leases``
    lists job slots beside locks, and every grant's fence is greater than
    every earlier grant's, whichever kind it was.
    """

    def __init__(self, table: LeaseTable) -> None:
        self._table = table

    def live(self, key: str, now: datetime) -> list[str]:
        """The holders of the key's unexpired slots, in slot order."""
        return [row.holder for _, row in self._table.live(key, now)]

    def take(
        self, key: str, limit: int, holder: str, now: datetime, expires_at: datetime
    ) -> int | None:
        """Grant the lowest free slot below ``limit``; ``None`` when the key is full."""
        # As the statement: the room is the limit minus the live slots (a
        # slot above a lowered limit still counts), the slot the lowest free.
        table = self._table
        if len(table.live(key, now)) >= limit:
            return None
        for number in range(limit):
            current = table.get(key, number)
            if current is None or current.expires_at <= now:
                table.fence += 1
                table.put(key, number, LeaseRow(holder, table.fence, expires_at))
                return number
        return None

    def renew(self, key: str, holder: str, now: datetime, expires_at: datetime) -> bool:
        """Extend the holder's unexpired slots of ``key``; False if none is left."""
        renewed = False
        for _, row in self._table.slots(key):
            if row.holder == holder and row.expires_at > now:
                row.expires_at = expires_at
                renewed = True
        return renewed

    def release(self, key: str, holder: str) -> None:
        """Free the holder's slots of ``key`` (another holder's are untouched)."""
        for number, row in self._table.slots(key):
            if row.holder == holder:
                self._table.delete(key, number)

    def busy_for(self, key: str, limit: int, job_id: UUID, now: datetime) -> bool:
        """Whether OTHER jobs hold at least ``limit`` live slots of ``key``."""
        suffix = f":{job_id}"
        others = [h for h in self.live(key, now) if not h.endswith(suffix)]
        return len(others) >= limit
