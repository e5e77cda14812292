"""Fleet-wide slots of capped jobs, in memory: the lease table's job rows.

The memory driver's twin of what ``job_claim_capped``, ``job_heartbeat_many``
and the settling statements do to ``ultimate_jobs_lease``: a key has
``limit`` numbered slots, a claim takes the lowest free ones (a slot is free
when nobody holds it or its lease expired), a renewal lands only while the
slot is unexpired and still the holder's, and a settle frees only the slot
its own claim holds. Called under the driver's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

__all__ = ["SlotTable"]


@dataclass(slots=True)
class _Slot:
    holder: str
    fence: int
    expires_at: datetime


class SlotTable:
    """Slots per lease key; each grant gets a fence from one counter."""

    def __init__(self) -> None:
        self._keys: dict[str, dict[int, _Slot]] = {}
        self._fence = 0

    def live(self, key: str, now: datetime) -> list[str]:
        """The holders of the key's unexpired slots, in slot order."""
        slots = self._keys.get(key, {})
        return [s.holder for _, s in sorted(slots.items()) if s.expires_at > now]

    def take(
        self, key: str, limit: int, holder: str, now: datetime, expires_at: datetime
    ) -> int | None:
        """Grant the lowest free slot below ``limit``; ``None`` when the key is full."""
        slots = self._keys.setdefault(key, {})
        # As the statement: the room is the limit minus the live slots (a
        # slot above a lowered limit still counts), the slot the lowest free.
        if len(self.live(key, now)) >= limit:
            return None
        for number in range(limit):
            current = slots.get(number)
            if current is None or current.expires_at <= now:
                self._fence += 1
                slots[number] = _Slot(holder, self._fence, expires_at)
                return number
        return None

    def renew(self, key: str, holder: str, now: datetime, expires_at: datetime) -> bool:
        """Extend the holder's unexpired slots of ``key``; False if none is left."""
        renewed = False
        for slot in self._keys.get(key, {}).values():
            if slot.holder == holder and slot.expires_at > now:
                slot.expires_at = expires_at
                renewed = True
        return renewed

    def release(self, key: str, holder: str) -> None:
        """Free the holder's slots of ``key`` (another holder's are untouched)."""
        slots = self._keys.get(key)
        if slots is None:
            return
        for number in [n for n, s in slots.items() if s.holder == holder]:
            del slots[number]
        if not slots:
            del self._keys[key]

    def busy_for(self, key: str, limit: int, job_id: UUID, now: datetime) -> bool:
        """Whether OTHER jobs hold at least ``limit`` live slots of ``key``."""
        suffix = f":{job_id}"
        others = [h for h in self.live(key, now) if not h.endswith(suffix)]
        return len(others) >= limit

    def snapshot(self) -> list[tuple[str, int, str, int, datetime]]:
        """Every slot: (key, slot, holder, fence, expires_at), sorted."""
        return sorted(
            (key, number, s.holder, s.fence, s.expires_at)
            for key, slots in self._keys.items()
            for number, s in slots.items()
        )
