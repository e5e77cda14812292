"""How one process paces its stores while they are away: driver-neutral.

A worker process has several threads that each talk to job storage (the
claim loop, the settler, the keeper, the scheduler, the slots, a lock
keeper, an outbox relay). When storage goes away they must not each retry
on their own schedule nor each log the loss: :class:`DatabaseOutage` is the
one view a process has of it. Every role reports a loss
(:meth:`DatabaseOutage.lost`) and a success (:meth:`DatabaseOutage.recovered`);
the outage is logged once when it starts (``jobs.db.lost``) and once when
the first role gets through again (``jobs.db.recovered``), and retries of
all roles follow one schedule (:meth:`DatabaseOutage.retry_in`), from
250 ms doubling to 2 s. One tracker per process (:func:`process_outage`).

A process that has never reached its store is not in an outage: it is most
likely pointed at the wrong place (a host, a port, a database that is not
there), and "every role reconnects" is the wrong advice. Until a role's call
lands once (:meth:`DatabaseOutage.reached`), a loss is reported as
``jobs.db.unreachable``, naming where the store was looked for
(:class:`StoreAddress`, given by the session that failed) with a fix that
fits, and repeated at most once a minute while it lasts; the callbacks of
:meth:`DatabaseOutage.on_unreachable` (``runjobs`` prints the line) get it
too.

A driver's sessions (``driver.sessions``, :mod:`.sessions`) report to it;
nothing here knows what the store is.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "FIRST_RETRY_S",
    "MAX_RETRY_S",
    "UNREACHABLE_REPEAT_S",
    "DatabaseOutage",
    "StoreAddress",
    "process_outage",
]

logger = logging.getLogger("django_ultimate_jobs")

FIRST_RETRY_S = 0.25
MAX_RETRY_S = 2.0
UNREACHABLE_REPEAT_S = 60.0
"""While a process has never reached its store, how often the line says so again."""


@dataclass(frozen=True)
class StoreAddress:
    """Where a driver looks for its store, for the line that says it is not there."""

    store: str
    """What the store is, with the setting that names it, e.g. ``the jobs
    database "shop" (DATABASES["default"])``."""
    host: str
    port: str
    fix: str
    """What to check: the setting, and whether the server is up."""
    database: str = ""

    def line(self, error: BaseException) -> str:
        """One line: the store, where it was looked for, the error and the fix."""
        where = f"{self.host}:{self.port}" if self.port else self.host
        return (
            f"cannot reach {self.store} at {where} "
            f"({_first_line(error)}); fix: {self.fix}"
        )


class DatabaseOutage:
    """One process's view of whether the jobs database answers.

    Shared by every role of a worker process: the loss and the recovery are
    logged once each per outage, and retries of all roles follow one
    schedule, so a database that is down sees a few attempts a second from
    this process, not one per thread per poll.
    """

    def __init__(
        self, first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S
    ) -> None:
        self.first_retry_s = first_retry_s
        self.max_retry_s = max_retry_s
        self._lock = threading.Lock()
        self._up = threading.Event()
        self._up.set()
        self._first_role: str | None = None
        self._first_using: str | None = None
        self._down_since: float | None = None
        self._recovered_at: float | None = None
        self._next_try = 0.0
        self._tries = 0
        self.outages = 0
        """Outages seen by this process (each logged once)."""
        self._on_recovery: list[Callable[[], None]] = []
        self._on_unreachable: list[Callable[[str], None]] = []
        self.reached = False
        """Whether a role's call has landed once in this process's life."""
        self._unreachable_said: float | None = None
        self._unreached_since: float | None = None
        self._partial = False

    def reach(self) -> None:
        """A role's call landed: from now on a loss is an outage (``jobs.db.lost``)."""
        self.reached = True

    def unreached_for(self) -> float:
        """Seconds since the first failed try while never reached (0: none, or reached)."""
        since = self._unreached_since
        if self.reached or since is None:
            return 0.0
        return time.monotonic() - since

    def on_unreachable(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(line)`` each time the never-reached line is logged."""
        with self._lock:
            self._on_unreachable.append(callback)

    def on_recovery(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the recovering thread) when an outage ends."""
        with self._lock:
            self._on_recovery.append(callback)

    def off_recovery(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (its thread ended; the tracker outlives it)."""
        with self._lock:
            if callback in self._on_recovery:
                self._on_recovery.remove(callback)

    @property
    def down(self) -> bool:
        """Whether the database is known not to answer right now."""
        return self._down_since is not None

    @property
    def partial_since(self) -> float | None:
        """When (``time.monotonic()``) the current outage began, if it is a
        partial one (see :meth:`lost`); ``None`` otherwise."""
        since = self._down_since
        return since if self._partial else None

    def wait_up(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the database to answer; True if it does."""
        return self._up.wait(timeout)

    def lost(
        self,
        role: str,
        error: BaseException,
        *,
        last_ok: float | None,
        using: str | None = None,
        address: StoreAddress | None = None,
        partial: bool = False,
    ) -> bool:
        """A role could not reach the database ``using`` (or it refused to serve).

        ``partial``: the store answers but refuses what matters (writes its
        replicas did not confirm): an outage this starts is ended only by a
        role whose own call failed and then landed, never by another role's
        answer (:meth:`recovered` with ``own=False``), which proves nothing.

        Answers True for an echo: the role's connection died in the outage
        that just ended and this is its first use since. It reconnects at
        once; a failure after that is a new outage. ``address``: where the
        role looked (said by ``jobs.db.unreachable`` while never reached).
        """
        now = time.monotonic()
        if not self.reached:
            self._unreached(role, error, address, now)
        with self._lock:
            if self._down_since is not None or not self.reached:
                if self._down_since is None:
                    self._go_down(role, using, now, partial)
                logger.debug("jobs.db.lost", extra={"role": role, "error": str(error)})
                return False
            if (
                last_ok is not None
                and self._recovered_at is not None
                and last_ok < self._recovered_at
            ):
                logger.debug(
                    "jobs.db.stale-connection",
                    extra={"role": role, "error": str(error)},
                )
                return True
            self._go_down(role, using, now, partial)
            self.outages += 1
        logger.warning(
            "jobs.db.lost",
            extra={
                "role": role,
                "error": _first_line(error),
                "fix": "nothing to do: every role reconnects with backoff; finished "
                "work is kept and settled when the database answers",
            },
        )
        return False

    def _go_down(self, role: str, using: str | None, now: float, partial: bool) -> None:
        # Under the lock: the first failure of an outage starts its schedule.
        self._down_since = now
        self._partial = partial
        self._first_role = role
        self._first_using = using
        self._up.clear()
        self._tries = 0
        self._next_try = now + self.first_retry_s

    def _unreached(
        self,
        role: str,
        error: BaseException,
        address: StoreAddress | None,
        now: float,
    ) -> None:
        # Never reached: say where it was looked for, once a minute at most.
        # A role that cannot say where (the LISTEN thread) waits for one that can.
        with self._lock:
            if self._unreached_since is None:
                self._unreached_since = now
            said = self._unreachable_said
            if address is None or (
                said is not None and now - said < UNREACHABLE_REPEAT_S
            ):
                return
            self._unreachable_said = now
            callbacks = tuple(self._on_unreachable)
        line = address.line(error)
        logger.warning(
            "jobs.db.unreachable",
            extra={
                "role": role,
                "store": address.store,
                "host": address.host,
                "port": address.port,
                "database": address.database,
                "error": _first_line(error),
                "fix": address.fix,
            },
        )
        for callback in callbacks:
            callback(line)

    def retry_in(self) -> float:
        """Seconds until the next try is due; 0 takes the try (and books the next)."""
        with self._lock:
            if self._down_since is None:
                return 0.0
            now = time.monotonic()
            if now < self._next_try:
                return self._next_try - now
            self._tries += 1
            wait = min(self.max_retry_s, self.first_retry_s * 2**self._tries)
            # Equal jitter: several processes restarted together spread out.
            self._next_try = now + wait / 2 + random.random() * wait / 2
            return 0.0

    def recovered(
        self, role: str, *, using: str | None = None, own: bool = True
    ) -> None:
        """A role got through: the outage (if any) is over.

        ``own`` False: the role had not failed itself, and its answer ends
        the outage only when it came from the database the outage is about
        (a relay's answer from the outbox database proves nothing about the
        jobs database). The LISTEN connection's answer ends only an outage it
        reported itself: LISTEN works on a read-only database, and proves
        nothing about the writes the other roles need.
        """
        self.reached = True
        with self._lock:
            if self._down_since is None:
                return
            if role == "listen" and self._first_role != "listen":
                return
            now = time.monotonic()
            if not own and (
                self._partial
                or using is None
                or using != self._first_using
                # An answer that comes within the first retry interval may be
                # to a call sent before the loss (the cut reaches each socket
                # in turn): it proves nothing about the database now.
                or now - self._down_since < self.first_retry_s
            ):
                return
            outage_s = now - self._down_since
            self._down_since = None
            self._recovered_at = now
            tries = self._tries
            callbacks = tuple(self._on_recovery)
            self._up.set()
        logger.warning(
            "jobs.db.recovered",
            extra={"role": role, "outage_s": round(outage_s, 3), "tries": tries},
        )
        for callback in callbacks:
            callback()


_PROCESS_OUTAGE: tuple[int, DatabaseOutage] | None = None
_PROCESS_OUTAGE_LOCK = threading.Lock()


def process_outage() -> DatabaseOutage:
    """This process's :class:`DatabaseOutage` (made on first use).

    Every role of the process that talks to the jobs database reports to
    it: the worker's threads and the lock keeper, whose renewals fail in
    the same outage. A forked child gets its own (the parent's threads,
    and their view, did not survive the fork).
    """
    global _PROCESS_OUTAGE
    with _PROCESS_OUTAGE_LOCK:
        pid = os.getpid()
        if _PROCESS_OUTAGE is None or _PROCESS_OUTAGE[0] != pid:
            _PROCESS_OUTAGE = (pid, DatabaseOutage())
        return _PROCESS_OUTAGE[1]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
