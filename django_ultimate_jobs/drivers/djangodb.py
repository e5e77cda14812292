"""This thread's Django database connections, kept usable whatever the store.

Every worker thread holds Django connections: the store's own (on
PostgreSQL), and whatever a job body opens on the project's databases,
whichever driver keeps the jobs. These functions look after them (close the
dead, reset the broken) and read what a database error says (an SQLSTATE of
the PostgreSQL backend, or a connection error of Django or psycopg). A
driver's :attr:`~.base.JobDriver.sessions` offers them to the worker as
``reset_broken``, ``drop_dead``, ``close_thread``, ``is_away`` and
``is_gone``.
"""

from __future__ import annotations

import logging
import select
from typing import Any

import psycopg
from django.db import connections
from django.db import utils as db_utils

__all__ = [
    "CONNECTION_ERRORS",
    "close_thread_connections",
    "drop_dead_connections",
    "drop_if_dead",
    "is_connection_gone",
    "is_database_away",
    "reset_broken_connections",
    "sqlstate",
]

logger = logging.getLogger("django_ultimate_jobs")

CONNECTION_ERRORS = (
    db_utils.OperationalError,
    db_utils.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
"""Errors that say a connection failed (lost, or never made)."""


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
        if isinstance(candidate, CONNECTION_ERRORS):
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


def reset_broken_connections() -> None:
    """Close this thread's connections that an error left unusable; keep the rest."""
    for connection in connections.all(initialized_only=True):
        if connection.errors_occurred:
            try:
                connection.close_if_unusable_or_obsolete()
            except Exception:  # a dead socket: drop it, reconnect next time
                connection.connection = None


def drop_dead_connections() -> None:
    """Close this thread's idle connections whose server end has gone away.

    A backend that was terminated (a restart, a failover, an idle-connection
    reaper) leaves its goodbye unread on the socket: ``poll()`` sees the
    socket readable without a round trip. Only such connections are probed
    (``SELECT 1``) and closed when dead, so the next job reconnects instead
    of failing its first query. Called by the slots before every body.
    """
    for connection in connections.all(initialized_only=True):
        drop_if_dead(connection)


def drop_if_dead(connection: Any) -> None:
    """Close ``connection`` if its server end has gone away (no round trip unless
    the server said something); one connection of :func:`drop_dead_connections`."""
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
