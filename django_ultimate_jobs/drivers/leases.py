"""The lease store: fleet-wide slots and locks (internal, like ``base``).

A lease is one row per ``(lease_key, slot)``: ``job.concurrency`` caps take
one of ``limit`` slots under ``job:<name>`` / ``job-key:<name>:<key>``, a
:func:`~django_ultimate_jobs.lock` takes the single slot of ``lock:<key>``.
Every grant draws its ``fence`` from one sequence, so a later holder's
number is greater than every earlier holder's, whatever the key. A row
whose ``expires_at`` passed is free: a dead holder's slot comes back after
its ttl without any sweep, and a lapsed holder cannot renew it back, even
when nobody took it yet (both drivers agree; the conformance suite pins it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["HeldLease", "LeaseRecord", "LeaseStore"]


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldLease:
    """One grant: what ``renew`` and ``release`` present."""

    key: str
    slot: int
    holder: str
    fence: int
    """The grant's fencing number (greater than every earlier grant's)."""
    expires_at: datetime
    """When the grant lapses unless renewed (the store's clock)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseRecord:
    """One stored lease row, as the operator surface lists it."""

    key: str
    slot: int
    holder: str
    fence: int
    expires_at: datetime
    expired: bool
    """Lapsed by the store's clock (the row stays until someone takes the slot)."""


class LeaseStore(Protocol):
    """``driver.leases``: slots and locks. Proven by the conformance suite."""

    def acquire(
        self, key: str, limit: int, ttl_ms: int, holder: str
    ) -> HeldLease | None:
        """Take the lowest free slot of ``key`` in ``0..limit-1`` for ``ttl_ms``.

        Never grants more than ``limit`` live slots; ``None`` when every slot
        is held. A slot whose row lapsed is free (its row is taken over).
        """
        ...

    def renew(self, lease: HeldLease, ttl_ms: int) -> bool:
        """Push the lease's expiry to ``ttl_ms`` from now; False: not yours.

        Lands only while ``lease.holder`` holds the slot AND it has not
        lapsed: a lapsed lease is lost even if nobody took the slot.
        """
        ...

    def release(self, lease: HeldLease) -> bool:
        """Free the slot if ``lease.holder`` still holds it; True if it did."""
        ...

    def held(self, key: str) -> int:
        """How many live (unexpired) slots ``key`` has (a diagnostic)."""
        ...

    def holders(self, key: str) -> list[str]:
        """The live holders of ``key``, in slot order."""
        ...

    def evict(self, key: str) -> list[LeaseRecord]:
        """Delete every row of ``key``, live or lapsed; answer the rows deleted.

        The operator's force-release of a stuck lock. The next grant draws a
        greater fence, so the evicted holder's fenced writes are refused
        once the next holder has written.
        """
        ...

    def records(self, *, prefix: str = "", limit: int = 200) -> list[LeaseRecord]:
        """Stored rows whose key starts with ``prefix``, lapsed ones included.

        Sorted by key (code-unit order) then slot; at most ``limit`` rows.
        """
        ...
