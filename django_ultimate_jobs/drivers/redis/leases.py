"""Slots and locks on Redis (``driver.leases``).

A lease key's slots are one hash (``s:<key>``) in the slot of its home:
a capped job's key lives in its queue's slot, so a claim takes a slot in
the same script as the row; a lock, or the leader lease, in a slot of its
own (``{l:<hash>}``). The fleet's index ``lk`` records each key's home the
first time it is written, and every grant draws its fence from the
fleet's one sequence (``INCR``) before the grant: a later grant's fence is
greater than every earlier grant's, whatever the key; a key never hands
out a fence below one it handed out before.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..leases import HeldLease, LeaseRecord
from .rows import from_us, to_us

if TYPE_CHECKING:
    from .store import RedisStore

__all__ = ["RedisLeases"]


class RedisLeases:
    """The Redis driver's lease store (``driver.leases``)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def _call(self, key: str, verb: str, *args: Any, home: str | None = None) -> Any:
        store = self.store
        where = home or store.lease_home_if_any(key) or "l"
        prefix = store.layout.home(key, where)
        return store.run("leases", prefix, [verb, store.now_arg(), key, *args])

    def acquire(
        self, key: str, limit: int, ttl_ms: int, holder: str
    ) -> HeldLease | None:
        """Take the lowest free slot of ``key`` (see ``LeaseStore.acquire``)."""
        store = self.store
        home = store.lease_home(key)
        fence = int(store.conn().incr(store.layout.fleet + "fence"))
        got = self._call(key, "acquire", limit, ttl_ms, holder, fence, home=home)
        if not got:
            return None
        slot, granted, expires = got
        return HeldLease(
            key=key,
            slot=int(slot),
            holder=holder,
            fence=int(granted),
            expires_at=from_us(expires),
        )

    def renew(self, lease: HeldLease, ttl_ms: int) -> bool:
        """Push the expiry; False once lapsed or taken."""
        return bool(self._call(lease.key, "renew", lease.slot, lease.holder, ttl_ms))

    def release(self, lease: HeldLease) -> bool:
        """Free the slot if this holder holds it."""
        return bool(self._call(lease.key, "release", lease.slot, lease.holder))

    def _rows(self, key: str, verb: str = "rows") -> list[LeaseRecord]:
        now, *rows = self._call(key, verb)
        moment = int(now)
        return [
            LeaseRecord(
                key=key,
                slot=int(slot),
                holder=holder,
                fence=int(fence),
                expires_at=from_us(expires),
                expired=int(expires) <= moment,
            )
            for slot, holder, fence, expires in rows
        ]

    def held(self, key: str) -> int:
        """How many live slots ``key`` has."""
        return sum(not row.expired for row in self._rows(key))

    def holders(self, key: str) -> list[str]:
        """The live holders of ``key`` in slot order."""
        return [row.holder for row in self._rows(key) if not row.expired]

    def evict(self, key: str) -> list[LeaseRecord]:
        """Delete every row of ``key``; answer them (see ``LeaseStore.evict``)."""
        return self._rows(key, "evict")

    def records(self, *, prefix: str = "", limit: int = 200) -> list[LeaseRecord]:
        """Stored rows under ``prefix`` by key (code-unit order) and slot."""
        listed: list[LeaseRecord] = []
        for key in sorted(k for k in self.store.lease_keys() if k.startswith(prefix)):
            listed += self._rows(key)
            if len(listed) >= limit:
                break
        return listed[:limit]

    def lead(self, key: str, holder: str, ttl_ms: int) -> bool:
        """The leader lease (slot 0; its fence counts takeovers)."""
        home = self.store.lease_home(key)
        return bool(self._call(key, "lead", holder, ttl_ms, home=home))

    def resign(self, key: str, holder: str) -> None:
        """Give up the leader lease ``key`` if ``holder`` holds it."""
        self._call(key, "resign", holder)

    def purge_locks(self, before: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` ``lock:`` rows lapsed before ``before``."""
        gone = 0
        for key in sorted(k for k in self.store.lease_keys() if k.startswith("lock:")):
            if gone >= limit:
                break
            gone += int(self._call(key, "purge", to_us(before), limit - gone))
        return gone
