"""Slots and locks in PostgreSQL (``driver.leases``): ``sql/leases.sql``.

Each call is one statement on the calling thread's connection to the
driver's database (inside the caller's transaction if it has one: the lock
keeper calls from its own thread, so a lock is never part of a business
transaction that could roll it back or hold it invisible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..leases import HeldLease, LeaseRecord
from .rows import scalar

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .driver import PostgresDriver

__all__ = ["PostgresLeases"]

_FILE = "leases.sql"
# A grant that lost a race for a slot that looked free tries again this
# many times (a plain cap never refuses while a slot is free for long).
_ACQUIRE_ROUNDS = 3


class PostgresLeases:
    """The Postgres driver's lease store (``driver.leases``)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self.driver = driver

    def _rows(self, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return self.driver._rows(name, params, filename=_FILE)

    def acquire(
        self, key: str, limit: int, ttl_ms: int, holder: str
    ) -> HeldLease | None:
        """Take the lowest free slot of ``key`` (see ``LeaseStore.acquire``)."""
        params = {"key": key, "limit": limit, "ttl_ms": ttl_ms, "holder": holder}
        for _ in range(_ACQUIRE_ROUNDS):
            ((slot, fence, expires_at, looked_free),) = self._rows(
                "lease_acquire", params
            )
            if slot is not None:
                return HeldLease(
                    key=key,
                    slot=slot,
                    holder=holder,
                    fence=fence,
                    expires_at=expires_at,
                )
            if not looked_free:
                return None
        return None

    def renew(self, lease: HeldLease, ttl_ms: int) -> bool:
        """Push the expiry; False once lapsed or taken."""
        return bool(self._rows("lease_renew", {**_identity(lease), "ttl_ms": ttl_ms}))

    def release(self, lease: HeldLease) -> bool:
        """Free the slot if this holder holds it."""
        return bool(self._rows("lease_release", _identity(lease)))

    def held(self, key: str) -> int:
        """How many live slots ``key`` has."""
        return int(scalar(self._rows("lease_held", {"key": key})))

    def holders(self, key: str) -> list[str]:
        """The live holders of ``key`` in slot order."""
        return [holder for (holder,) in self._rows("lease_holders", {"key": key})]

    def evict(self, key: str) -> list[LeaseRecord]:
        """Delete every row of ``key``; answer them (see ``LeaseStore.evict``)."""
        return _records(self._rows("lease_evict", {"key": key}))

    def records(self, *, prefix: str = "", limit: int = 200) -> list[LeaseRecord]:
        """Stored rows under ``prefix`` by key (code-unit order) and slot."""
        return _records(self._rows("lease_list", {"prefix": prefix, "limit": limit}))


def _records(rows: list[tuple[Any, ...]]) -> list[LeaseRecord]:
    return [
        LeaseRecord(
            key=key,
            slot=slot,
            holder=holder,
            fence=fence,
            expires_at=expires_at,
            expired=expired,
        )
        for key, slot, holder, fence, expires_at, expired in rows
    ]


def _identity(lease: HeldLease) -> dict[str, Any]:
    return {"key": lease.key, "slot": lease.slot, "holder": lease.holder}
