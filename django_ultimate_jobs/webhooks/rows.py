"""The sender's statements, in SQL: one read and one write per attempt.

The read and a failure's record run in the slot; a success's record is
batched by the settle thread with its job's ack (:func:`record_successes`).

A delivery attempt reads its delivery with its endpoint, POSTs, and records
the attempt. Built by the ORM those two statements cost about three times
the CPU of the POST itself (compiling a ``select_related`` query and an
``UPDATE`` with JSON expressions, per attempt), and a worker's slots share
one interpreter: here they are fixed SQL text on the slot's connection.
Both go to the write database of :class:`WebhookDelivery`, so an attempt
reads what the previous attempt wrote even with a lagging replica.

They run as the Postgres driver's statements do (``drivers/postgres``): a
server-binding cursor on Django's own psycopg connection, kept per thread,
and prepared once per connection unless ``PREPARE`` is off. Django's
client-binding cursor quoted every parameter in Python and PostgreSQL
parsed and planned both statements on every attempt: about a tenth of the
worker's CPU per delivery in a py-spy profile (bench/README.md).

A failure's record is ONE statement whatever it changes: the attempt alone,
or the attempt and the endpoint's failure streak (a data-modifying ``WITH``, so
both commit together without a transaction of their own).

The rare writes (an endpoint disabled, a delivery failed for good) stay on
the ORM, in :mod:`.delivery` and :mod:`.endpoints`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.db import connections, router
from django.db.backends.postgresql.psycopg_any import register_tzloader

from ..conf import jobs_settings
from ..drivers.postgres.prepare import prepare_explicit_only

__all__ = [
    "DeliveryRow",
    "EndpointRow",
    "Success",
    "read_delivery",
    "record_attempt",
    "record_successes",
]

MAX_LOGGED_ATTEMPTS = 50
"""Attempts kept in a delivery's ``attempt_log`` (the latest ones)."""

_DELIVERY = "ultimate_jobs_webhook_delivery"
_ENDPOINT = "ultimate_jobs_webhook_endpoint"

# The read's columns, by name, in the order its SELECT lists them.
_DELIVERY_COLUMNS = ("id", "state", "last_status", "attempts", "body", "msg_id")
_ENDPOINT_COLUMNS = (
    "id",
    "url",
    "headers",
    "secret",
    "previous_secret",
    "previous_secret_until",
    "disabled_at",
    "consecutive_failures",
    "last_success_at",
)
_READ = (
    "SELECT "
    + ", ".join(
        [f"d.{name}" for name in _DELIVERY_COLUMNS]
        + [f"e.{name}" for name in _ENDPOINT_COLUMNS]
    )
    + f"""
  FROM {_DELIVERY} d JOIN {_ENDPOINT} e ON e.id = d.endpoint_id
 WHERE d.id = %(delivery)s
"""
)
_AT = {
    name: index
    for index, name in enumerate(
        [f"d.{name}" for name in _DELIVERY_COLUMNS]
        + [f"e.{name}" for name in _ENDPOINT_COLUMNS]
    )
}

# The attempt's entry appended to the log; the trimmed form (the oldest entry
# dropped once the log holds MAX_LOGGED_ATTEMPTS) is the rare, longer one.
_LOG = "attempt_log"
_LOG_TRIMMED = (
    f"(CASE WHEN jsonb_array_length(attempt_log) >= {MAX_LOGGED_ATTEMPTS} "
    "THEN attempt_log - 0 ELSE attempt_log END)"
)
_ATTEMPT = f"""
UPDATE {_DELIVERY}
   SET attempt_log = {{log}} || %(entry)s::jsonb,
       attempts = attempts + 1,
       last_status = %(status)s,
       last_error = %(error)s,
       last_attempt_at = %(now)s,
       state = %(state)s
 WHERE id = %(delivery)s
"""
# The endpoint's streak moves in the same statement as the attempt (a
# data-modifying WITH runs to completion whether or not it is read), so the
# two commit together without a transaction's BEGIN and COMMIT round trips.
_STREAK = {
    None: "{attempt}",
    "failed": (
        "WITH attempt AS ({attempt}) "
        f"UPDATE {_ENDPOINT} SET consecutive_failures = consecutive_failures + 1, "
        "last_failure_at = %(now)s WHERE id = %(endpoint)s "
        "RETURNING consecutive_failures"
    ),
}
_RECORD = {
    (trimmed, change): streak.format(
        attempt=_ATTEMPT.format(log=_LOG_TRIMMED if trimmed else _LOG).strip()
    )
    for trimmed in (False, True)
    for change, streak in _STREAK.items()
}
"""The record's statement by (log trimmed, endpoint change)."""


# Successes are recorded by the worker's settle thread, many in one statement
# with their jobs' ack (``ctx.write_on_ack``), not by the slot that sent
# them. Fenced: a delivery is written only while its attempt count is the
# one its attempt read, so a batch written again (a store outside the
# acks' transaction) appends nothing twice, and a rerun's write still lands.
_SUCCESSES = f"""
WITH attempt AS (
  UPDATE {_DELIVERY} d
     SET attempt_log = {_LOG_TRIMMED} || u.entry::jsonb,
         attempts = d.attempts + 1,
         last_status = u.status,
         last_error = '',
         last_attempt_at = u.at,
         state = 'delivered',
         delivered_at = u.at
    FROM unnest(%(ids)s::bigint[], %(seen)s::int[], %(entries)s::text[],
                %(statuses)s::int[], %(ats)s::timestamptz[])
         AS u(id, seen, entry, status, at)
   WHERE d.id = u.id AND d.attempts = u.seen
)
UPDATE {_ENDPOINT} e
   SET consecutive_failures = 0,
       last_success_at = GREATEST(e.last_success_at, s.at)
  FROM unnest(%(endpoints)s::bigint[], %(endpoint_ats)s::timestamptz[]) AS s(id, at)
 WHERE e.id = s.id
"""


@dataclass(frozen=True, slots=True)
class EndpointRow:
    """The endpoint fields one attempt reads."""

    pk: int
    url: str
    headers: dict[str, Any]
    secret: str
    previous_secret: str | None
    previous_secret_until: datetime | None
    disabled_at: datetime | None
    consecutive_failures: int
    last_success_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """The delivery fields one attempt reads, with its endpoint's."""

    pk: int
    state: str
    last_status: int | None
    attempts: int
    body: str
    msg_id: str
    endpoint: EndpointRow


def _alias() -> str:
    from .models import WebhookDelivery

    return router.db_for_write(WebhookDelivery)


_LOCAL = threading.local()
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid


def _cursor(connection: Any) -> psycopg.Cursor[Any]:
    """This thread's server-binding cursor on ``connection``, kept.

    Building one per statement copies the connection's adapters map. A
    cursor is kept per psycopg connection and Django time zone: like
    Django's own cursors it loads timestamptz in the connection's zone
    (registered on the cursor when a setting changed it since the connect).
    """
    raw = connection.connection
    zone = connection.timezone
    kept = _LOCAL.__dict__.get("cursor")
    if kept is None or kept[0] is not raw or kept[1] is not zone:
        cursor = psycopg.Cursor(raw)
        loader = raw.adapters.get_loader(_TIMESTAMPTZ, psycopg.pq.Format.TEXT)
        if zone != getattr(loader, "timezone", None):
            register_tzloader(zone, cursor)
        kept = _LOCAL.cursor = (raw, zone, cursor)
    return kept[2]


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the write connection of the webhook tables; its rows.

    As the Postgres driver runs its statements: in the caller's transaction
    (autocommit outside one), on a server-binding cursor kept per thread and
    connection, prepared unless ``PREPARE`` is off.
    """
    connection = connections[_alias()]
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    cursor = _cursor(connection)
    prepare = jobs_settings().prepare
    if prepare:
        prepare_explicit_only(connection.connection)  # Django sets None: off
    with connection.wrap_database_errors:
        cursor.execute(sql, params, prepare=prepare)
        result = cursor.pgresult
        if result is None or result.status != _TUPLES_OK:
            return []
        return cursor.fetchall()


def read_delivery(delivery_id: int) -> DeliveryRow | None:
    """The delivery ``delivery_id`` with its endpoint, or None if it is gone."""
    found = _rows(_READ, {"delivery": delivery_id})
    if not found:
        return None
    row = found[0]
    headers = row[_AT["e.headers"]]
    if isinstance(headers, str):  # Django loads jsonb as text
        headers = None if headers == "{}" else json.loads(headers)
    endpoint = EndpointRow(
        pk=row[_AT["e.id"]],
        url=row[_AT["e.url"]],
        headers=headers or {},
        secret=row[_AT["e.secret"]],
        previous_secret=row[_AT["e.previous_secret"]],
        previous_secret_until=row[_AT["e.previous_secret_until"]],
        disabled_at=row[_AT["e.disabled_at"]],
        consecutive_failures=row[_AT["e.consecutive_failures"]],
        last_success_at=row[_AT["e.last_success_at"]],
    )
    return DeliveryRow(
        pk=row[_AT["d.id"]],
        state=row[_AT["d.state"]],
        last_status=row[_AT["d.last_status"]],
        attempts=row[_AT["d.attempts"]],
        body=row[_AT["d.body"]],
        msg_id=row[_AT["d.msg_id"]],
        endpoint=endpoint,
    )


def record_attempt(
    delivery: DeliveryRow,
    entry: dict[str, Any],
    *,
    state: str,
    now: datetime,
    endpoint_change: str | None,
) -> int:
    """Append ``entry`` to the delivery's log and set its state; with
    ``endpoint_change`` ``"failed"`` the endpoint's streak
    moves in the same statement. Answers the endpoint's consecutive failures
    after a ``"failed"`` change, else 0."""
    trimmed = delivery.attempts >= MAX_LOGGED_ATTEMPTS - 1
    found = _rows(
        _RECORD[trimmed, endpoint_change],
        {
            "entry": json.dumps([entry]),
            "status": entry["status"],
            "error": entry["error"],
            "now": now,
            "state": state,
            "delivery": delivery.pk,
            "endpoint": delivery.endpoint.pk,
        },
    )
    return int(found[0][0]) if found else 0


@dataclass(frozen=True, slots=True)
class Success:
    """One delivered attempt, for :func:`record_successes`."""

    delivery: int
    seen: int
    """The delivery's attempt count its attempt read (the write's fence)."""
    entry: dict[str, Any]
    at: datetime
    endpoint: int
    endpoint_change: bool
    """Whether the endpoint's row changes (a streak to end, an old last success)."""


def record_successes(successes: list[Success]) -> None:
    """Record delivered attempts in one statement (the settle thread's writer).

    Each delivery gets its attempt's entry and ``delivered``, unless its
    attempt count moved since its attempt read it (written already, or
    another attempt owns it now); each endpoint that needs it has its
    failure streak ended and its last success moved on.
    """
    endpoints: dict[int, datetime] = {}
    for success in successes:
        if success.endpoint_change:
            at = endpoints.get(success.endpoint)
            endpoints[success.endpoint] = (
                success.at if at is None else max(at, success.at)
            )
    _rows(
        _SUCCESSES,
        {
            "ids": [s.delivery for s in successes],
            "seen": [s.seen for s in successes],
            "entries": [json.dumps([s.entry]) for s in successes],
            "statuses": [s.entry["status"] for s in successes],
            "ats": [s.at for s in successes],
            # In id order: two workers' batches lock shared endpoints in the
            # same order (a deadlock would only be retried, but costs a second).
            "endpoints": sorted(endpoints),
            "endpoint_ats": [endpoints[pk] for pk in sorted(endpoints)],
        },
    )
