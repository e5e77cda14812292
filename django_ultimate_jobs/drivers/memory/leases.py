"""Slots and locks in memory (``driver.leases``), as ``sql/leases.sql`` answers.

:class:`LeaseTable` is the rows and the rules, called with the driver's lock
held and the instant of the call (a statement reads ``now()`` once); the
claim can use it inside its own critical section. :class:`MemoryLeases` is
the store the driver exposes, one lock and one clock read per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..leases import HeldLease, LeaseRecord

if TYPE_CHECKING:
    from .driver import MemoryDriver

__all__ = ["LeaseRow", "LeaseTable", "MemoryLeases"]


@dataclass(slots=True)
class LeaseRow:
    """One ``(key, slot)`` row: its holder, fence and expiry."""

    holder: str
    fence: int
    expires_at: datetime


class LeaseTable:
    """Lease rows keyed by ``(key, slot)``, and one fence sequence.

    Rows are kept per key (as the primary key's index serves the statements
    on Postgres): a call about one key reads that key's slots only, however
    many other keys hold rows. Only the listings and the retention sweep
    read every row (:meth:`items`).
    """

    def __init__(self) -> None:
        self._keys: dict[str, dict[int, LeaseRow]] = {}
        self.fence = 0

    def get(self, key: str, slot: int) -> LeaseRow | None:
        """The row of ``(key, slot)``, if any."""
        slots = self._keys.get(key)
        return None if slots is None else slots.get(slot)

    def put(self, key: str, slot: int, row: LeaseRow) -> None:
        """Store ``row`` as ``(key, slot)``, replacing the row there."""
        self._keys.setdefault(key, {})[slot] = row

    def delete(self, key: str, slot: int) -> None:
        """Delete the row of ``(key, slot)`` (the key goes with its last row)."""
        slots = self._keys[key]
        del slots[slot]
        if not slots:
            del self._keys[key]

    def slots(self, key: str) -> list[tuple[int, LeaseRow]]:
        """The rows of ``key``, lapsed ones included, in slot order."""
        return sorted(self._keys.get(key, {}).items(), key=lambda item: item[0])

    def items(self) -> list[tuple[str, int, LeaseRow]]:
        """Every row as ``(key, slot, row)``, unordered (listings, sweeps)."""
        return [
            (key, slot, row)
            for key, slots in self._keys.items()
            for slot, row in slots.items()
        ]

    def acquire(
        self, key: str, limit: int, ttl_ms: int, holder: str, now: datetime
    ) -> HeldLease | None:
        """The lowest slot with no live row, taken (its lapsed row replaced)."""
        for slot in range(limit):
            row = self.get(key, slot)
            if row is not None and row.expires_at > now:
                continue
            self.fence += 1
            expires_at = now + timedelta(milliseconds=ttl_ms)
            self.put(key, slot, LeaseRow(holder, self.fence, expires_at))
            return HeldLease(
                key=key,
                slot=slot,
                holder=holder,
                fence=self.fence,
                expires_at=expires_at,
            )
        return None

    def renew(self, lease: HeldLease, ttl_ms: int, now: datetime) -> bool:
        """Push the expiry while the holder holds the slot and it has not lapsed."""
        row = self.get(lease.key, lease.slot)
        if row is None or row.holder != lease.holder or row.expires_at <= now:
            return False
        row.expires_at = now + timedelta(milliseconds=ttl_ms)
        return True

    def release(self, lease: HeldLease) -> bool:
        """Delete the row if the holder holds it (lapsed or not, as the SQL does)."""
        row = self.get(lease.key, lease.slot)
        if row is None or row.holder != lease.holder:
            return False
        self.delete(lease.key, lease.slot)
        return True

    def lead(self, key: str, holder: str, ttl_ms: int, now: datetime) -> bool:
        """The leader lease (slot 0), as ``leader_acquire`` answers it.

        Its fence counts takeovers of this key (1, then +1 per new holder),
        not grants of the shared sequence, as the Postgres statement does.
        """
        row = self.get(key, 0)
        if row is not None and row.holder != holder and row.expires_at > now:
            return False
        fence = 1 if row is None else row.fence + (row.holder != holder)
        self.put(key, 0, LeaseRow(holder, fence, now + timedelta(milliseconds=ttl_ms)))
        return True

    def resign(self, key: str, holder: str) -> None:
        """Give up the leader lease ``key`` if ``holder`` holds it."""
        row = self.get(key, 0)
        if row is not None and row.holder == holder:
            self.delete(key, 0)

    def live(self, key: str, now: datetime) -> list[tuple[int, LeaseRow]]:
        """The unexpired rows of ``key`` in slot order."""
        return [(slot, row) for slot, row in self.slots(key) if row.expires_at > now]


class MemoryLeases:
    """The memory driver's lease store (``driver.leases``)."""

    def __init__(self, driver: MemoryDriver) -> None:
        self.driver = driver

    def acquire(
        self, key: str, limit: int, ttl_ms: int, holder: str
    ) -> HeldLease | None:
        """Take the lowest free slot of ``key`` (see ``LeaseStore.acquire``)."""
        with self.driver._lock:
            table = self.driver._lease_table
            return table.acquire(key, limit, ttl_ms, holder, self.driver._now())

    def renew(self, lease: HeldLease, ttl_ms: int) -> bool:
        """Push the expiry; False once lapsed or taken."""
        with self.driver._lock:
            return self.driver._lease_table.renew(lease, ttl_ms, self.driver._now())

    def release(self, lease: HeldLease) -> bool:
        """Free the slot if this holder holds it."""
        with self.driver._lock:
            return self.driver._lease_table.release(lease)

    def held(self, key: str) -> int:
        """How many live slots ``key`` has."""
        with self.driver._lock:
            return len(self.driver._lease_table.live(key, self.driver._now()))

    def holders(self, key: str) -> list[str]:
        """The live holders of ``key`` in slot order."""
        with self.driver._lock:
            live = self.driver._lease_table.live(key, self.driver._now())
        return [row.holder for _, row in live]

    def evict(self, key: str) -> list[LeaseRecord]:
        """Delete every row of ``key``; answer them (see ``LeaseStore.evict``)."""
        with self.driver._lock:
            table = self.driver._lease_table
            rows = [(key, slot, row) for slot, row in table.slots(key)]
            for _, slot, _ in rows:
                table.delete(key, slot)
            return _records(rows, self.driver._now())

    def records(self, *, prefix: str = "", limit: int = 200) -> list[LeaseRecord]:
        """Stored rows under ``prefix`` by key (code-unit order) and slot."""
        with self.driver._lock:
            rows = sorted(
                (key, slot, row)
                for key, slot, row in self.driver._lease_table.items()
                if key.startswith(prefix)
            )[:limit]
            return _records(rows, self.driver._now())


def _records(rows: list[tuple[str, int, LeaseRow]], now: datetime) -> list[LeaseRecord]:
    return [
        LeaseRecord(
            key=key,
            slot=slot,
            holder=row.holder,
            fence=row.fence,
            expires_at=row.expires_at,
            expired=row.expires_at <= now,
        )
        for key, slot, row in rows
    ]
