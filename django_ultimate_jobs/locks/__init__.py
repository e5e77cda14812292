"""Locks: one holder fleet-wide (:func:`lock`) and fenced writes (:func:`fenced_update`).

See ``docs/howto/locks.md``. The lease rows live in the driver's lease
store (``driver.leases``), beside the ``job(concurrency=...)`` slots.
"""

from .fencing import fenced_update
from .lock import HeldLock, Lock, lock

__all__ = ["HeldLock", "Lock", "fenced_update", "lock"]
