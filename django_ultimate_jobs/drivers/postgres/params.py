"""The parameters of the driver's statements, built from its requests.

Pure functions from the contract's records (``EnqueueRequest``,
``NackRequest``, ``JobFilter``, ``ClaimOptions``) to the named parameters of
``sql/queries.sql``, and the answer to an enqueue that met a live key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from ...errors import JobDuplicate
from ...states import JobState
from ...validation import JsonRefused, json_text, storable_text
from ..base import (
    MAX_ERROR_STACK_LENGTH,
    ClaimOptions,
    Enqueued,
    EnqueueRequest,
    JobFilter,
    NackRequest,
    nack_state,
)
from .jsonb import dumps, exact_floats

__all__ = [
    "array_literal",
    "bounded_stack",
    "dedupe",
    "filter_params",
    "input_text",
    "key_of",
    "many_row",
    "nack_outcome",
    "result_json",
    "storable_or_none",
    "tenant_skip",
]


def array_literal(values: Sequence[UUID | int]) -> str:
    """A PostgreSQL array literal of uuids or integers, for a ``::type[]`` cast.

    psycopg dumps a Python list element by element in Python; one string of
    values that need no quoting is a single dump. Only for uuids and ints.
    """
    return "{" + ",".join(map(str, values)) + "}"


def result_json(value: Any) -> str | None:
    """A handler's result as jsonb text, or ``None`` when it is not JSON-safe."""
    if value is None:
        return None
    try:
        # UTF-8 refuses lone surrogates at the bind, jsonb refuses NUL, and a
        # deep enough value fails to encode: each would fail the whole ack
        # (the job would re-run), so such a result is dropped like any
        # other that is not JSON-safe.
        text = json_text(value, exact=False)
    except JsonRefused:
        return None
    return exact_floats(text)  # whole floats past 1e16 stay floats (see .jsonb)


def storable_or_none(text: str | None) -> str | None:
    """``text`` made storable (no NUL, no lone surrogate); ``None`` stays."""
    return None if text is None else storable_text(text)


def bounded_stack(stack: str | None) -> str | None:
    """The last ``MAX_ERROR_STACK_LENGTH`` characters of a stack."""
    if stack is None or len(stack) <= MAX_ERROR_STACK_LENGTH:
        return stack
    return stack[-MAX_ERROR_STACK_LENGTH:]


def nack_outcome(request: NackRequest) -> str | None:
    """The counter a nack adds to (``dead``, ``failed``, ``retried``), if any."""
    state = nack_state(request)
    if state.value == "dead":
        return "dead"
    if state.value == "failed":
        return "failed"
    if state.value == "ready" and request.counts_as_attempt:
        return "retried"
    return None


def filter_params(where: JobFilter) -> dict[str, Any]:
    """The listing and bulk statements' filter parameters (``@job_filter``)."""
    states = where.states if where.states is not None else frozenset(JobState)
    return {
        "states": sorted(state.value for state in states),
        "queue": where.queue,
        "name": where.name,
        "tenant": where.tenant_id,
        "id_min": where.id_min,
        "id_max": where.id_max,
        "created_from": where.created_from,
        "created_to": where.created_to,
        "error_code": where.error_code,
    }


def many_row(index: int, job_id: UUID, request: EnqueueRequest) -> dict[str, Any]:
    """One row of job_enqueue_many's JSON array; what is unset stays out."""
    row = {
        "ord": index,
        "id": str(job_id),
        "name": request.name,
        "queue": request.queue,
        "input": request.input,
        "max_attempts": request.max_attempts,
        "priority": request.priority,
    }
    if request.id is not None:
        row["caller_id"] = True
    if request.run_id is not None:
        row["run_id"] = str(request.run_id)
    if request.idempotency_key is not None:
        row["idempotency_key"] = request.idempotency_key
    if request.run_at is not None:
        row["run_at"] = request.run_at.isoformat()
    if request.delay_ms:
        row["delay_ms"] = request.delay_ms
    if request.tenant_id is not None:
        row["tenant_id"] = request.tenant_id
    if request.enqueued_by is not None:
        row["enqueued_by"] = request.enqueued_by
    if request.traceparent is not None:
        row["traceparent"] = request.traceparent
    if request.concurrency_key is not None:
        row["concurrency_key"] = request.concurrency_key
        row["concurrency_limit"] = request.concurrency_limit
    return row


def tenant_skip(options: ClaimOptions) -> dict[str, Any]:
    """The claim_tenant_open fragment's parameters: the full tenants, and
    whether the bucket of jobs without a tenant still has room."""
    return {
        "skip": [t for t in options.skip_tenants if t is not None],
        "untenanted": None not in options.skip_tenants,
    }


def input_text(request: EnqueueRequest) -> str:
    """The input's jsonb text: the enqueue's checked JSON when it came along
    (made exact for jsonb's numbers, a scan of the text), else encoded here."""
    if request.input_json is not None:
        return exact_floats(request.input_json)
    return dumps(request.input)


def key_of(request: EnqueueRequest) -> tuple[str, str, str]:
    """The idempotency key's namespace: (name, tenant or "", key or "")."""
    return (request.name, request.tenant_id or "", request.idempotency_key or "")


def dedupe(request: EnqueueRequest, holder: tuple[UUID, UUID]) -> Enqueued:
    """The answer to an enqueue whose key a live job holds.

    Raises:
        JobDuplicate: the request says ``on_conflict="error"``.
    """
    if request.on_conflict == "error":
        raise JobDuplicate(
            f"a live {request.name} job already holds this idempotency key",
            fix=f"python manage.py jobs show {holder[0]}  (or on_conflict='dedupe')",
            meta={"holder": str(holder[0]), "job": request.name},
        )
    return Enqueued(holder[0], holder[1], True)
