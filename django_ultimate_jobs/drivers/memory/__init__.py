"""The memory driver: the Postgres driver's answers, in one process's memory.

For tests and local development (``ULTIMATE_JOBS = {"DRIVER": "memory"}``).
The driver (:mod:`.driver`) keeps its rows in :mod:`.rows`; its roles are
:mod:`.cron`, :mod:`.steps`, :mod:`.leases` (with the job slots of
:mod:`.slots`) and :mod:`.maintenance`.
"""

from __future__ import annotations

from .driver import MemoryDriver

__all__ = ["MemoryDriver"]
