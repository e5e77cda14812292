"""The sender's statements, in SQL: one read and one write per attempt.

A delivery attempt reads its delivery with its endpoint, POSTs, and records
the attempt. Built by the ORM those two statements cost about three times
the CPU of the POST itself (compiling a ``select_related`` query and an
``UPDATE`` with JSON expressions, per attempt), and a worker's slots share
one interpreter: here they are fixed SQL text on the slot's connection.
Both go to the write database of :class:`WebhookDelivery`, so an attempt
reads what the previous attempt wrote even with a lagging replica.

The rare writes (an endpoint disabled, a delivery failed for good) stay on
the ORM, in :mod:`.delivery` and :mod:`.endpoints`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, router

__all__ = ["DeliveryRow", "EndpointRow", "read_delivery", "record_attempt"]

MAX_LOGGED_ATTEMPTS = 50
"""Attempts kept in a delivery's ``attempt_log`` (the latest ones)."""

_DELIVERY = "ultimate_jobs_webhook_delivery"
_ENDPOINT = "ultimate_jobs_webhook_endpoint"

_READ = f"""
SELECT d.id, d.state, d.last_status, d.attempts, d.body, d.msg_id,
       e.id, e.url, e.headers, e.secret, e.previous_secret,
       e.previous_secret_until, e.disabled_at, e.consecutive_failures,
       e.last_success_at
  FROM {_DELIVERY} d JOIN {_ENDPOINT} e ON e.id = d.endpoint_id
 WHERE d.id = %s
"""

# The attempt's entry appended to the log; the trimmed form (the oldest entry
# dropped once the log holds MAX_LOGGED_ATTEMPTS) is the rare, longer one.
_LOG = "attempt_log"
_LOG_TRIMMED = (
    f"(CASE WHEN jsonb_array_length(attempt_log) >= {MAX_LOGGED_ATTEMPTS} "
    "THEN attempt_log - 0 ELSE attempt_log END)"
)
_RECORD = f"""
UPDATE {_DELIVERY}
   SET attempt_log = {{log}} || %s::jsonb,
       attempts = attempts + 1,
       last_status = %s,
       last_error = %s,
       last_attempt_at = %s,
       state = %s,
       delivered_at = CASE WHEN %s THEN %s ELSE delivered_at END
 WHERE id = %s
"""
_RECORD_PLAIN = _RECORD.format(log=_LOG)
_RECORD_TRIMMED = _RECORD.format(log=_LOG_TRIMMED)
_SUCCEEDED = (
    f"UPDATE {_ENDPOINT} SET consecutive_failures = 0, last_success_at = %s "
    "WHERE id = %s"
)
_FAILED = (
    f"UPDATE {_ENDPOINT} SET consecutive_failures = consecutive_failures + 1, "
    "last_failure_at = %s WHERE id = %s RETURNING consecutive_failures"
)


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


def read_delivery(delivery_id: int) -> DeliveryRow | None:
    """The delivery ``delivery_id`` with its endpoint, or None if it is gone."""
    with connections[_alias()].cursor() as cursor:
        cursor.execute(_READ, [delivery_id])
        row = cursor.fetchone()
    if row is None:
        return None
    headers = row[8]
    if isinstance(headers, str):  # Django loads jsonb as text
        headers = json.loads(headers)
    endpoint = EndpointRow(
        pk=row[6],
        url=row[7],
        headers=headers or {},
        secret=row[9],
        previous_secret=row[10],
        previous_secret_until=row[11],
        disabled_at=row[12],
        consecutive_failures=row[13],
        last_success_at=row[14],
    )
    return DeliveryRow(
        pk=row[0],
        state=row[1],
        last_status=row[2],
        attempts=row[3],
        body=row[4],
        msg_id=row[5],
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
    ``endpoint_change`` ``"succeeded"`` or ``"failed"`` the endpoint's streak
    moves in the same transaction. Answers the endpoint's consecutive
    failures after a ``"failed"`` change, else 0."""
    from django.db import transaction

    delivered = state == "delivered"
    sql = (
        _RECORD_TRIMMED
        if delivery.attempts >= MAX_LOGGED_ATTEMPTS - 1
        else _RECORD_PLAIN
    )
    params = [
        json.dumps([entry]),
        entry["status"],
        entry["error"],
        now,
        state,
        delivered,
        now,
        delivery.pk,
    ]
    alias = _alias()
    if endpoint_change is None:
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, params)
        return 0
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        if endpoint_change == "succeeded":
            cursor.execute(_SUCCEEDED, [now, delivery.endpoint.pk])
            return 0
        cursor.execute(_FAILED, [now, delivery.endpoint.pk])
        found = cursor.fetchone()
    return int(found[0]) if found else 0
