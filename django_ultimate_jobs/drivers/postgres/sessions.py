"""The Postgres driver's sessions: named connections, reset after a loss, paced.

``driver.sessions`` of the Postgres driver (:class:`PostgresConnectivity`,
the :class:`~..sessions.Connectivity` contract). Each worker thread that
talks to the jobs database (the claim loop, the settler, the keeper, the
scheduler, the slots, a lock keeper, an outbox relay; the LISTEN thread has
a psycopg connection of its own, :mod:`.listener`) opens a
:class:`RoleConnection`:

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
  try on one process-wide schedule (:class:`~..outage.DatabaseOutage`),
  from 250 ms doubling to 2 s: the whole process makes a few attempts a
  second at most, however many threads wait;
- the outage is logged once when it starts (``jobs.db.lost``) and once when
  the first role gets through again (``jobs.db.recovered``), not per try.
  One tracker per process (:func:`~..outage.process_outage`): the worker's
  roles and the lock keeper (``locks/keeper.py``) share it, so a database
  restart under a job holding a lock is still one line each way.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from ..djangodb import (
    CONNECTION_ERRORS,
    drop_if_dead,
    reset_broken_connections,
    sqlstate,
)
from ..outage import DatabaseOutage, StoreAddress, process_outage
from ..sessions import DjangoConnectivity, Session

__all__ = [
    "UNAVAILABLE_SQLSTATES",
    "PostgresConnectivity",
    "RoleConnection",
    "application_name",
    "database_address",
    "is_connection_lost",
    "is_unavailable",
    "recover",
]

logger = logging.getLogger("django_ultimate_jobs")

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


def application_name(role: str, worker_id: str) -> str:
    """``uj:<role>:<pid>:<suffix>`` for a worker id ``host:pid:suffix``."""
    tail = ":".join(worker_id.split(":")[-2:]) or str(os.getpid())
    return f"uj:{role}:{tail}"[:MAX_APPLICATION_NAME]


def database_address(using: str) -> StoreAddress:
    """Where the Django alias ``using`` points (host, port, database), and the fix."""
    settings = connections[using].settings_dict
    host = str(settings.get("HOST") or "localhost")
    port = str(settings.get("PORT") or 5432)
    name = str(settings.get("NAME") or "")
    entry = f'DATABASES["{using}"]'
    return StoreAddress(
        store=f'the PostgreSQL database "{name}" ({entry})',
        host=host,
        port=port,
        database=name,
        fix=f"check HOST, PORT and NAME of {entry} (ULTIMATE_JOBS['DATABASE'] "
        f"names the alias), and that a PostgreSQL server is up and accepts "
        f"connections at {host}:{port}",
    )


def is_connection_lost(error: BaseException, raw: Any) -> bool:
    """Whether ``error`` left the connection ``raw`` unusable (or never made one)."""
    if not isinstance(error, CONNECTION_ERRORS) and not isinstance(
        error.__cause__, CONNECTION_ERRORS
    ):
        return False
    return raw is None or bool(raw.closed) or bool(getattr(raw, "broken", False))


def is_unavailable(error: BaseException, raw: Any) -> bool:
    """Whether the database cannot serve now (lost, restarting, read-only, locked)."""
    if is_connection_lost(error, raw):
        return True
    return sqlstate(error) in UNAVAILABLE_SQLSTATES


class RoleConnection:
    """One thread's connection to the jobs database, for one role.

    Not thread-safe by design: each role object is used by the thread that
    owns it (Django's connections are per thread).
    """

    def __init__(
        self,
        role: str,
        *,
        using: str,
        worker_id: str,
        outage: DatabaseOutage,
        on_bind: Callable[[], None] | None = None,
    ) -> None:
        self.role = role
        self.using = using
        self.name = application_name(role, worker_id)
        self.outage = outage
        self.failing = False
        self._last_ok: float | None = None
        self._on_bind = on_bind

    def bind(self) -> None:
        """Name this thread's connection for the role (call in the owning thread).

        A claim loop's session also switches the thread to generic plans
        (``PostgresDriver.use_generic_plans_in_this_thread``) first.
        """
        if self._on_bind is not None:
            self._on_bind()
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
            outage = self.outage
            address = None if outage.reached else database_address(self.using)
            if outage.lost(
                self.role,
                error,
                last_ok=self._last_ok,
                using=self.using,
                address=address,
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
        drop_if_dead(connections[self.using])

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
        elif not self.outage.reached:
            self.outage.reach()


def recover(role: Session | None, error: BaseException) -> bool:
    """After a database error: :meth:`RoleConnection.failed`, or a plain reset.

    Code that runs both inside a worker role and outside one (the test
    helpers, the operator) calls this; True means the database is away.
    """
    if role is not None:
        return role.failed(error)
    reset_broken_connections()
    return False


class PostgresConnectivity(DjangoConnectivity):
    """``driver.sessions`` of the Postgres driver: :class:`RoleConnection` s
    on the driver's alias, reporting to the process's outage tracker."""

    def __init__(self, using: str, claim_thread: Callable[[], None]) -> None:
        self.using = using
        self._claim_thread = claim_thread

    def open(
        self,
        role: str,
        *,
        worker_id: str,
        outage: DatabaseOutage | None = None,
        claim_thread: bool = False,
    ) -> RoleConnection:
        """A :class:`RoleConnection` named for ``role`` (bind it in its thread)."""
        return RoleConnection(
            role,
            using=self.using,
            worker_id=worker_id,
            outage=outage if outage is not None else process_outage(),
            on_bind=self._claim_thread if claim_thread else None,
        )

    def is_unavailable(self, error: BaseException) -> bool:
        """:func:`is_unavailable` with this thread's connection to the alias."""
        return is_unavailable(error, connections[self.using].connection)
