"""Each worker thread's database connection: named, reset after a loss, paced.

A worker process has several threads that own a connection to the jobs
database (the claim loop, the settler, the lease keeper, the scheduler, the
slots; the LISTEN thread has a psycopg connection of its own). Each is
given a :class:`RoleConnection`:

- :meth:`RoleConnection.bind` names the thread's connection
  ``uj:<role>:<pid>:<worker>`` (``application_name``), so an operator (and a
  test) can tell which backend serves which role;
- :meth:`RoleConnection.failed` is called in every ``except`` that catches
  a database error: it closes the connection when the error left it
  unusable, so the next use reconnects (a dead connection kept was the
  first wave's failure: a settler that never settled again after a
  failover), and answers whether the database is *unavailable* (lost,
  restarting, read-only, locked) rather than the statement wrong;
- while a role is failing, :meth:`RoleConnection.retry_in` paces its next
  try on one process-wide schedule (:class:`DatabaseOutage`), from 250 ms
  doubling to 2 s: the whole process makes a few attempts a second at
  most, however many threads wait;
- the outage is logged once when it starts (``jobs.db.lost``) and once when
  the first role gets through again (``jobs.db.recovered``), not per try.
  One tracker per process (:func:`process_outage`): the worker's roles and
  the lock keeper (``locks/keeper.py``) share it, so a database restart
  under a job holding a lock is still one line each way.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connections
from django.db import utils as db_utils

__all__ = [
    "UNAVAILABLE_SQLSTATES",
    "DatabaseOutage",
    "RoleConnection",
    "application_name",
    "close_thread_connections",
    "drop_dead_connections",
    "is_connection_gone",
    "is_connection_lost",
    "is_database_away",
    "process_outage",
    "recover",
    "reset_broken_connections",
    "sqlstate",
]

logger = logging.getLogger("django_ultimate_jobs")

FIRST_RETRY_S = 0.25
MAX_RETRY_S = 2.0
MAX_APPLICATION_NAME = 63  # NAMEDATALEN - 1: PostgreSQL cuts longer names

UNAVAILABLE_SQLSTATES = frozenset(
    {
        "25006",  # read_only_sql_transaction: a standby, or writes switched off
        "55P03",  # lock_not_available: a table held by a migration or an operator
        "57014",  # query_canceled: statement_timeout while the table was locked
        "57P01",  # admin_shutdown: the server is stopping
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: the server is starting or recovering
        "53300",  # too_many_connections
        "08000",  # connection_exception and its subclasses below
        "08001",
        "08003",
        "08004",
        "08006",
    }
)
"""SQLSTATEs that say the database cannot serve now, not that a statement is wrong."""

_CONNECTION_ERRORS = (
    db_utils.OperationalError,
    db_utils.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def application_name(role: str, worker_id: str) -> str:
    """``uj:<role>:<pid>:<suffix>`` for a worker id ``host:pid:suffix``."""
    tail = ":".join(worker_id.split(":")[-2:]) or str(os.getpid())
    return f"uj:{role}:{tail}"[:MAX_APPLICATION_NAME]


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of ``error`` or of what it wraps (Django, our coded errors)."""
    candidate: BaseException | None = error
    for _ in range(4):  # ours -> Django's -> psycopg's
        if candidate is None:
            return None
        state = getattr(candidate, "sqlstate", None)
        if state:
            return str(state)
        candidate = candidate.__cause__
    return None


def is_connection_lost(error: BaseException, raw: Any) -> bool:
    """Whether ``error`` left the connection ``raw`` unusable (or never made one)."""
    if not isinstance(error, _CONNECTION_ERRORS) and not isinstance(
        error.__cause__, _CONNECTION_ERRORS
    ):
        return False
    return raw is None or bool(raw.closed) or bool(getattr(raw, "broken", False))


_SESSION_REFUSED = frozenset({"25006", "57P01", "57P02", "57P03", "53300"})


def is_database_away(error: BaseException) -> bool:
    """Whether a job body's error says the database is away, not the body wrong.

    Judged from the error alone (the body may have used any alias): a lost
    connection, a server shutting down or starting, a read-only session. A
    statement timeout or a lock timeout is the body's own business.
    """
    state = sqlstate(error)
    if state is not None:
        return state in _SESSION_REFUSED or state.startswith("08")
    candidate: BaseException | None = error
    for _ in range(4):
        if candidate is None:
            return False
        if isinstance(candidate, _CONNECTION_ERRORS):
            return True
        candidate = candidate.__cause__ or candidate.__context__
    return False


def is_connection_gone(error: BaseException) -> bool:
    """Whether a job body's error is its connection dropped under it.

    Never the body's fault (a read-only session may be: a handler that
    writes to a replica), so such an attempt is handed back uncounted.
    """
    state = sqlstate(error)
    if state is not None:
        return state in ("57P01", "57P02", "57P03") or state.startswith("08")
    return is_database_away(error)


def close_thread_connections() -> None:
    """Close this thread's connections outside a transaction (new sessions next)."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        try:
            connection.close()
        except Exception:  # a dead socket: drop it, reconnect next time
            connection.connection = None


def is_unavailable(error: BaseException, raw: Any) -> bool:
    """Whether the database cannot serve now (lost, restarting, read-only, locked)."""
    if is_connection_lost(error, raw):
        return True
    return sqlstate(error) in UNAVAILABLE_SQLSTATES


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
    ) -> bool:
        """A role could not reach the database ``using`` (or it refused to serve).

        Answers True for an echo: the role's connection died in the outage
        that just ended and this is its first use since. It reconnects at
        once; a failure after that is a new outage.
        """
        now = time.monotonic()
        with self._lock:
            if self._down_since is not None:
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
            self._down_since = now
            self._first_role = role
            self._first_using = using
            self._up.clear()
            self._tries = 0
            self._next_try = now + self.first_retry_s
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
        with self._lock:
            if self._down_since is None:
                return
            if role == "listen" and self._first_role != "listen":
                return
            now = time.monotonic()
            if not own and (
                using is None
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


class RoleConnection:
    """One thread's connection to the jobs database, for one role.

    Not thread-safe by design: each role object is used by the thread that
    owns it (Django's connections are per thread).
    """

    def __init__(
        self, role: str, *, using: str, worker_id: str, outage: DatabaseOutage
    ) -> None:
        self.role = role
        self.using = using
        self.name = application_name(role, worker_id)
        self.outage = outage
        self.failing = False
        self._last_ok: float | None = None

    def bind(self) -> None:
        """Name this thread's connection for the role (call in the owning thread)."""
        connection = connections[self.using]
        settings = dict(connection.settings_dict)
        options = dict(settings.get("OPTIONS") or {})
        own = options.get("application_name")
        name = f"{own}/{self.name}" if own else self.name
        options["application_name"] = name[:MAX_APPLICATION_NAME]
        settings["OPTIONS"] = options
        # A copy per thread: the dict is shared by every thread's wrapper.
        connection.settings_dict = settings
        if connection.connection is not None:
            connection.close()  # reconnect under the new name

    def failed(self, error: BaseException) -> bool:
        """Leave the connection usable after ``error``; True if the database is away.

        Call in every ``except`` that catches an error of a database call.
        A lost connection is closed (the next use reconnects); a healthy one
        with errors is checked and kept. False means the statement failed on
        its own: the caller logs it as before.
        """
        connection = connections[self.using]
        raw = connection.connection
        unavailable = is_unavailable(error, raw)
        try:
            if unavailable:
                # Lost, or a session that cannot serve (read-only, shutting
                # down): a new session picks up what changed on the server.
                connection.close()
            else:
                connection.close_if_unusable_or_obsolete()
        except Exception:  # closing a dead socket may fail too: drop it
            connection.connection = None
            logger.debug("jobs.db.close-failed", exc_info=True)
        if unavailable:
            self.failing = True
            if self.outage.lost(
                self.role, error, last_ok=self._last_ok, using=self.using
            ):
                # An echo gets one immediate retry, not a second one: if the
                # new connection fails too, that is an outage of its own.
                self._last_ok = time.monotonic()
        return unavailable

    def refresh(self) -> None:
        """Before a call: reconnect now if the server closed this connection.

        No round trip unless the server has said something (see
        :func:`drop_dead_connections`): a terminated backend is replaced
        before the call instead of failing it.
        """
        _drop_if_dead(connections[self.using])

    def retry_in(self) -> float:
        """Seconds to wait before this role's next database call (0: go)."""
        return self.outage.retry_in() if self.failing else 0.0

    def stand_down(self) -> None:
        """This role has nothing for the database now: it stops waiting its turn.

        Its next call will tell whether the database answers; the outage
        (if any) is ended by a role that got through.
        """
        self.failing = False

    def ok(self) -> None:
        """A database call of this role succeeded: an outage, if any, is over.

        Whichever role reported the outage: a slot whose connection was
        killed under a body reports one, and no other role may ever fail
        (their own connections were fine), so waiting for the reporter to
        get through left every slot waiting while the claim loop claimed.
        """
        self._last_ok = time.monotonic()
        if self.failing:
            self.failing = False
            self.outage.recovered(self.role, using=self.using)
        elif self.outage.down:
            self.outage.recovered(self.role, using=self.using, own=False)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def reset_broken_connections() -> None:
    """Close this thread's connections that an error left unusable; keep the rest."""
    for connection in connections.all(initialized_only=True):
        if connection.errors_occurred:
            try:
                connection.close_if_unusable_or_obsolete()
            except Exception:  # a dead socket: drop it, reconnect next time
                connection.connection = None


def recover(role: RoleConnection | None, error: BaseException) -> bool:
    """After a database error: :meth:`RoleConnection.failed`, or a plain reset.

    Code that runs both inside a worker role and outside one (the test
    helpers, the operator) calls this; True means the database is away.
    """
    if role is not None:
        return role.failed(error)
    reset_broken_connections()
    return False


def drop_dead_connections() -> None:
    """Close this thread's idle connections whose server end has gone away.

    A backend that was terminated (a restart, a failover, an idle-connection
    reaper) leaves its goodbye unread on the socket: ``poll()`` sees the
    socket readable without a round trip. Only such connections are probed
    (``SELECT 1``) and closed when dead, so the next job reconnects instead
    of failing its first query. Called by the slots before every body.
    """
    for connection in connections.all(initialized_only=True):
        _drop_if_dead(connection)


def _drop_if_dead(connection: Any) -> None:
    raw = connection.connection
    if raw is None or connection.in_atomic_block:
        return
    try:
        if raw.closed or getattr(raw, "broken", False):
            connection.close()
            return
        poller = select.poll()
        poller.register(raw.fileno(), select.POLLIN)
        if not poller.poll(0):
            return  # nothing unread: the usual case, no round trip
        usable = connection.is_usable()
    except Exception:  # the socket itself is gone
        usable = False
    if not usable:
        logger.debug("jobs.db.stale-connection", extra={"alias": connection.alias})
        try:
            connection.close()
        except Exception:
            connection.connection = None
