"""What a taken lock gives its block: :class:`HeldLock` and its cancellation.

``held.cancellation`` is a :class:`~django_ultimate_jobs.context.CancellationToken`
(the kind a job's ``ctx.cancellation`` is), set by the lock keeper when the
lock is lost, and read as set once the last landed renewal is a whole ttl
old, so a keeper stuck on a dead socket cannot leave a block believing it
still holds the lock.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..context import CancellationToken
from ..errors import LockLost

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet

    from ..drivers.leases import HeldLease
    from .keeper import Renewal

__all__ = ["FORKED", "HeldLock", "LockCancellation", "lost_error"]

FORKED = (
    "this process is a fork of the one that took it, and a lock belongs to "
    "the process that took it: the parent still holds it"
)


class LockCancellation(CancellationToken):
    """``held.cancellation``: set when the lock is lost.

    Also set, when read, once the last landed renewal is a whole ttl old
    (the keeper stuck on a dead socket cannot renew nor decide), and in a
    forked child: a lock belongs to the process that took it.
    """

    __slots__ = ("_pid", "_renewal")

    def __init__(self) -> None:
        super().__init__()
        self._renewal: Renewal | None = None
        self._pid = os.getpid()

    def is_set(self) -> bool:
        """Whether the lock was lost (its work is no longer exclusive)."""
        if self._reason is None:
            renewal = self._renewal
            if renewal is not None and time.monotonic() >= renewal.deadline:
                self.cancel(
                    lost_error(renewal.lease, "no renewal landed within the ttl")
                )
            elif self._pid != os.getpid() and renewal is not None:
                self.cancel(lost_error(renewal.lease, FORKED))
        return super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until lost (True) or ``timeout`` s pass (False).

        Waits in steps no longer than the time left before the renewal
        deadline, so a keeper stuck on a dead socket still reads as lost
        when that deadline passes; a renewal that lands pushes the deadline
        on and the wait goes on to its full ``timeout``.
        """
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            if self.is_set():
                return True
            now = time.monotonic()
            step = None if end is None else end - now
            if step is not None and step <= 0:
                return False
            renewal = self._renewal
            if renewal is not None:
                # A little past the deadline, so is_set() reads it as passed.
                to_deadline = max(0.0, renewal.deadline - now) + 0.001
                step = to_deadline if step is None else min(step, to_deadline)
            if super().wait(step):
                return True

    def raise_if_cancelled(self) -> None:
        """Raise ``X_LOCK_LOST`` if the lock was lost."""
        self.is_set()
        super().raise_if_cancelled()


class HeldLock:
    """What ``with lock(...) as held`` gives the block.

    Attributes:
        key: the key given to :func:`lock` (stored as ``lock:<key>``).
        token: the grant's fencing number, greater than every earlier
            holder's; write it beside the data (see :meth:`fenced_update`).
        holder: who holds it (``host:pid:random``), as the admin shows it.
        cancellation: set when the lock is lost; check it in long loops.
    """

    def __init__(self, key: str, lease: HeldLease, cancellation: LockCancellation):
        self.key = key
        self.token = lease.fence
        self.holder = lease.holder
        self.lease = lease
        self.cancellation = cancellation

    @property
    def lost(self) -> bool:
        """Whether the lock was lost (the block's work is not exclusive any more)."""
        return self.cancellation.is_set()

    def fenced_update(
        self, queryset: QuerySet[Model], *, field: str = "lock_token", **values: Any
    ) -> int:
        """Update ``queryset`` with this lock's token (see :func:`fenced_update`).

        Raises:
            LockTokenStale: a later holder's token is stored; nothing written.
        """
        from .fencing import fenced_update

        return fenced_update(queryset, self.token, field=field, **values)

    def __repr__(self) -> str:
        return f"<HeldLock {self.key!r} token={self.token} holder={self.holder!r}>"


def lost_error(lease: HeldLease, why: str) -> LockLost:
    """The ``X_LOCK_LOST`` error of ``lease``, saying ``why``."""
    return LockLost(
        f"the lock was lost while held ({why}): its work was not exclusive",
        meta={"key": lease.key, "holder": lease.holder, "token": lease.fence},
    )
