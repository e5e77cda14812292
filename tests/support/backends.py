"""Find and terminate PostgreSQL backends by ``application_name``.

A worker names the connection of each thread role (``uj:<role>:<worker>``,
roles ``claim``, ``settle``, ``keep``, ``listen``, ``schedule``), so a fault
test can kill exactly one role's connection, the way a failover or an
idle-connection reaper would, and check the worker recovers:

    killed = terminate_backends(url, "uj:settle:%", database=db_name)

Every helper opens its own short connection to ``url`` (any database on the
server: ``pg_stat_activity`` covers them all), so the test's Django
connection is never the one killed. A pattern is a SQL ``LIKE`` pattern on
``application_name``; a callable instead is a predicate on each ``Backend``.
Only client backends count (not autovacuum, walwriter...), and never the
helper's own. ``terminate_backends`` waits (with a deadline) until the
terminated backends are gone from ``pg_stat_activity``, so the next query a
worker runs on that connection fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row

from .waiting import wait_until

__all__ = ["Backend", "backends", "terminate_backends", "wait_for_backends"]

Match = str | Callable[["Backend"], bool]

_LIST = """
    select pid, application_name, datname as database, state,
           backend_start, xact_start, query
      from pg_stat_activity
     where backend_type = 'client backend'
       and pid <> pg_backend_pid()
       and (%(database)s::text is null or datname = %(database)s::text)
       and application_name like %(pattern)s
     order by backend_start, pid
"""


@dataclass(frozen=True)
class Backend:
    """One row of ``pg_stat_activity``: a client connection's server process."""

    pid: int
    application_name: str
    database: str | None
    state: str | None
    backend_start: datetime
    xact_start: datetime | None
    query: str | None


def backends(
    url: str, match: Match = "%", *, database: str | None = None
) -> list[Backend]:
    """The client backends whose ``application_name`` matches, oldest first.

    Args:
        url: a URL or conninfo of any database on the server.
        match: a ``LIKE`` pattern on ``application_name``, or a predicate.
        database: only backends connected to this database.
    """
    pattern = match if isinstance(match, str) else "%"
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.cursor(row_factory=class_row(Backend))
        params = {"database": database, "pattern": pattern}
        rows = cursor.execute(_LIST, params).fetchall()
    return rows if isinstance(match, str) else [row for row in rows if match(row)]


def terminate_backends(
    url: str,
    match: Match,
    *,
    database: str | None = None,
    timeout: float = 10.0,
) -> list[Backend]:
    """``pg_terminate_backend`` every matching backend; answer those it ended.

    Waits until they have left ``pg_stat_activity`` (a deadline of
    ``timeout`` seconds). Matching nothing is not an error: the answer is
    empty (assert on it when a backend must have been there).
    """
    targets = backends(url, match, database=database)
    if not targets:
        return []
    pids = [backend.pid for backend in targets]
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            "select pg_terminate_backend(pid) from unnest(%s::int[]) as pid", (pids,)
        )

        def gone() -> bool:
            left = conn.execute(
                "select count(*) from pg_stat_activity where pid = any(%s)", (pids,)
            ).fetchone()
            return left is not None and left[0] == 0

        wait_until(
            gone,
            timeout,
            message=lambda: f"backends {pids} still there after pg_terminate_backend",
        )
    return targets


def wait_for_backends(
    url: str,
    match: Match,
    *,
    database: str | None = None,
    count: int = 1,
    timeout: float = 20.0,
) -> list[Backend]:
    """Wait (with a deadline) until at least ``count`` backends match; answer them.

    For "the worker's settler has connected": a worker opens some
    connections lazily, on first use.
    """

    def matching() -> list[Backend]:
        found = backends(url, match, database=database)
        return found if len(found) >= count else []

    def present() -> str:
        names = [b.application_name for b in backends(url, database=database)]
        return f"client backends now: {names}"

    matching.__name__ = f"{count}_backends_match_{match!r}"
    return wait_until(matching, timeout, interval=0.1, message=present)
