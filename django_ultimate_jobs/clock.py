"""Clocks: the database decides time; tests may freeze and move it.

Every time-dependent statement takes ``coalesce(%(now)s, now())``: with the
:class:`SystemClock` the parameter is ``None`` and PostgreSQL's clock
decides (a skewed worker can neither steal nor hold a lease); with a
:class:`ManualClock` a test passes its own instant and moves it. The memory
driver reads :meth:`Clock.now` directly.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock", "system_clock"]


@runtime_checkable
class Clock(Protocol):
    """What drivers ask for the time."""

    def now(self) -> datetime:
        """Return the current instant (timezone-aware, UTC)."""
        ...

    def sql_now(self) -> datetime | None:
        """Return the instant to bind as ``%(now)s``; ``None`` = database clock."""
        ...


class SystemClock:
    """The real clock; SQL statements use the database's ``now()``."""

    def now(self) -> datetime:
        """Return the wall clock in UTC."""
        return datetime.now(UTC)

    def sql_now(self) -> None:
        """Return ``None``: the database clock decides."""
        return None


system_clock = SystemClock()


class ManualClock:
    """A clock that only moves when told to (tests, ``run_jobs()``)."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start or datetime.now(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Return the frozen instant."""
        with self._lock:
            return self._now

    def sql_now(self) -> datetime:
        """Return the frozen instant, which statements use instead of now()."""
        return self.now()

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        """Move the clock forward by ``delta`` or ``timedelta(**kwargs)``."""
        step = delta if delta is not None else timedelta(**kwargs)
        if step < timedelta(0):
            raise ValueError("a ManualClock only moves forward")
        with self._lock:
            self._now += step
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (must not be earlier than now)."""
        with self._lock:
            if instant < self._now:
                raise ValueError("a ManualClock only moves forward")
            self._now = instant
