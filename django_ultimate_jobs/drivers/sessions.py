"""Sessions: the connections a worker's threads hold to job storage.

Part of the driver contract (``driver.sessions``, a :class:`Connectivity`).
Each thread of a worker process that talks to storage (the claim loop, the
settler, the keeper, the scheduler, the slots, a lock keeper, a relay)
opens a :class:`Session` for its role, binds it in its own thread, and
reports every failure and every success to it: the session keeps its
connection usable and the process's :class:`~.outage.DatabaseOutage` paces
the retries of all roles on one schedule and logs the outage once each way.

The Postgres driver's sessions are named connections of its Django alias
(:mod:`.postgres.sessions`). A store that lives in this process (the memory
driver) never goes away: :class:`LocalConnectivity` opens sessions that
never fail, and still looks after the Django connections job bodies use
(:mod:`.djangodb`), as every worker thread needs whatever the store.
"""

from __future__ import annotations

from typing import Protocol

from .djangodb import (
    close_thread_connections,
    drop_dead_connections,
    is_connection_gone,
    is_database_away,
    reset_broken_connections,
    sqlstate,
)
from .outage import DatabaseOutage, process_outage

__all__ = [
    "TRANSIENT_SQLSTATES",
    "Connectivity",
    "DjangoConnectivity",
    "LocalConnectivity",
    "LocalSession",
    "Session",
    "WakeListener",
]

TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})
"""Deadlock and serialization failure: the statement was rolled back whole,
and the same write lands on a retry."""


class Session(Protocol):
    """One thread's connection to storage, for one role (``"claim"``, ...).

    Not thread-safe by design: the thread that opened it is the only user.
    """

    role: str
    """The role named at :meth:`Connectivity.open`."""
    failing: bool
    """The last use failed and no later one has landed."""

    def bind(self) -> None:
        """Make this thread's connection the role's (call in the owning thread)."""
        ...

    def refresh(self) -> None:
        """Before a unit of work: replace a connection the server closed."""
        ...

    def retry_in(self) -> float:
        """Seconds to wait before this role's next call (0: go)."""
        ...

    def failed(self, error: BaseException) -> bool:
        """Keep the connection usable after ``error``; True if storage is away.

        True: an outage or a lost connection, reported to the process's
        outage tracker (logged once per outage). False: the call failed on
        its own, and the caller logs it.
        """
        ...

    def ok(self) -> None:
        """A call of this role landed: an outage, if any, is over."""
        ...

    def stand_down(self) -> None:
        """This role has nothing for storage now: it stops waiting its turn."""
        ...


class Connectivity(Protocol):
    """``driver.sessions``: how a process's threads reach the driver's storage."""

    def open(
        self,
        role: str,
        *,
        worker_id: str,
        outage: DatabaseOutage | None = None,
        claim_thread: bool = False,
    ) -> Session:
        """A session for ``role`` of worker ``worker_id``, bound later in its thread.

        ``outage`` defaults to the process's (:func:`~.outage.process_outage`);
        ``claim_thread`` True: the session tunes its connection for the claim
        loop when bound (generic plans on PostgreSQL).
        """
        ...

    def outage(self) -> DatabaseOutage:
        """The process-wide outage tracker the sessions report to."""
        ...

    def is_away(self, error: BaseException) -> bool:
        """Whether a job body's ``error`` says its database is away (lost,
        shutting down, starting, read-only), not the body wrong."""
        ...

    def is_gone(self, error: BaseException) -> bool:
        """Whether a job body's ``error`` is its connection dropped under it
        (never the body's fault: the attempt is handed back uncounted)."""
        ...

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether storage cannot serve now (unreachable, restarting,
        read-only, locked), judged with this thread's connection to it."""
        ...

    def is_transient(self, error: BaseException) -> bool:
        """Whether ``error`` is a deadlock or serialization victim: the whole
        call was rolled back and the same call lands on a retry."""
        ...

    def error_code(self, error: BaseException) -> str | None:
        """The store's code for ``error`` (the SQLSTATE on PostgreSQL), for logs."""
        ...

    def recover(self, session: Session | None, error: BaseException) -> bool:
        """After an error: :meth:`Session.failed`, or (no session) a plain
        reset of this thread's broken connections; True: storage is away."""
        ...

    def reset_broken(self) -> None:
        """Close this thread's connections an error left unusable; keep the rest."""
        ...

    def drop_dead(self) -> None:
        """Close this thread's idle connections whose server end has gone away
        (no round trip unless the server said something; before every body)."""
        ...

    def close_thread(self) -> None:
        """Close this thread's connections outside a transaction."""
        ...


class WakeListener(Protocol):
    """What ``driver.wake_listener()`` answers: a thread that turns the
    store's notifications into wake hints (LISTEN/NOTIFY on PostgreSQL)."""

    live: bool
    """Whether the wake is proven (a probe came back since the last dial)."""

    def start(self) -> None:
        """Start listening in a daemon thread."""
        ...

    def stop(self) -> None:
        """Stop listening (idempotent)."""
        ...


class LocalSession:
    """A session to storage in this process's memory: it never fails."""

    failing = False

    def __init__(self, role: str) -> None:
        self.role = role

    def bind(self) -> None:
        """Nothing to bind."""

    def refresh(self) -> None:
        """Nothing to replace."""

    def retry_in(self) -> float:
        """Always 0: the store never goes away."""
        return 0.0

    def failed(self, error: BaseException) -> bool:
        """False: an error of an in-memory store is the call's own."""
        return False

    def ok(self) -> None:
        """Nothing to report."""

    def stand_down(self) -> None:
        """Nothing to stop waiting for."""


class DjangoConnectivity:
    """What every driver's ``sessions`` share: this thread's Django connections.

    Job bodies use Django's databases whatever the store, so the body-side
    verbs (``is_away``, ``is_gone``, ``drop_dead``, ``close_thread``,
    ``reset_broken``) and the reading of an error (``is_transient``,
    ``error_code``) look after those (:mod:`.djangodb`). A subclass opens the
    store's sessions (:meth:`open`) and says when the store is away
    (:meth:`is_unavailable`).
    """

    def open(
        self,
        role: str,
        *,
        worker_id: str,
        outage: DatabaseOutage | None = None,
        claim_thread: bool = False,
    ) -> Session:
        """A :class:`LocalSession` for ``role`` (a store with no connection)."""
        return LocalSession(role)

    def outage(self) -> DatabaseOutage:
        """The process's outage tracker (:func:`~.outage.process_outage`)."""
        return process_outage()

    def is_away(self, error: BaseException) -> bool:
        """See :func:`~.djangodb.is_database_away`."""
        return is_database_away(error)

    def is_gone(self, error: BaseException) -> bool:
        """See :func:`~.djangodb.is_connection_gone`."""
        return is_connection_gone(error)

    def is_unavailable(self, error: BaseException) -> bool:
        """False: a store without a connection is never away."""
        return False

    def is_transient(self, error: BaseException) -> bool:
        """A deadlock (40P01) or serialization failure (40001)."""
        return sqlstate(error) in TRANSIENT_SQLSTATES

    def error_code(self, error: BaseException) -> str | None:
        """The SQLSTATE ``error`` carries, if any (:func:`~.djangodb.sqlstate`)."""
        return sqlstate(error)

    def recover(self, session: Session | None, error: BaseException) -> bool:
        """:meth:`Session.failed`, or (no session) reset this thread's broken
        Django connections and answer False."""
        if session is not None:
            return session.failed(error)
        reset_broken_connections()
        return False

    def reset_broken(self) -> None:
        """See :func:`~.djangodb.reset_broken_connections`."""
        reset_broken_connections()

    def drop_dead(self) -> None:
        """See :func:`~.djangodb.drop_dead_connections`."""
        drop_dead_connections()

    def close_thread(self) -> None:
        """See :func:`~.djangodb.close_thread_connections`."""
        close_thread_connections()


class LocalConnectivity(DjangoConnectivity):
    """``sessions`` of a store in this process's memory: its sessions never
    fail (:class:`LocalSession`); job bodies' Django connections are still
    looked after, exactly as on PostgreSQL."""
