"""Rows by name: the projections of the driver's statements, and their builders.

Every statement that answers rows has its columns named here, in the order
its ``SELECT``/``RETURNING`` lists them (``sql/queries.sql``); the driver
reads a column through the name's position (:func:`positions`), never a
bare number. Records are built by :func:`row_builder` from those named
maps.

A frozen dataclass's generated ``__init__`` sets each field with
``object.__setattr__`` by name and matches keyword arguments: for the
claim's ``ClaimedJob`` (18 fields) that was ~3 us a row, the largest
per-row cost of the worker's claim loop after the row fetch itself
(bench/README.md). :func:`row_builder` compiles, once, a function that
allocates the instance and stores each slot through its member descriptor,
reading each field's column at the position the named map gives: the same
object (same class, fields, equality, ``replace()``), about a quarter of
the cost. Only for dataclasses with ``slots=True`` whose ``__init__`` does
nothing else (no ``__post_init__``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ...states import parse_state
from ..base import ClaimedJob, JobRecord
from .jsonb import loads

__all__ = [
    "CLAIM",
    "CLAIM_COLUMNS",
    "COUNTER_BUCKET_COLUMNS",
    "COUNTER_TOTAL_COLUMNS",
    "EVENT_COLUMNS",
    "JOB_COLUMNS",
    "STATS_COLUMNS",
    "STEP_COLUMNS",
    "WORKER_COLUMNS",
    "claimed_keyed",
    "claimed_plain",
    "named",
    "positions",
    "record",
    "row_builder",
    "scalar",
]

T = TypeVar("T")


def row_builder(
    cls: type[T],
    columns: Mapping[str, int],
    *,
    decode: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Callable[[Any], T]:
    """A function ``row -> cls`` reading field ``f`` from ``row[columns[f]]``.

    ``decode`` maps a field to a function applied to its column. A field not
    in ``columns`` gets its default (it must have a plain one).
    """
    if hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: a slotted dataclass without __post_init__")
    decode = decode or {}
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = ["def build(row):", "    obj = _new(_cls)"]
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        setter = f"_set_{field.name}"
        namespace[setter] = cls.__dict__[field.name].__set__
        if field.name in columns:
            value = f"row[{columns[field.name]}]"
            if field.name in decode:
                namespace[f"_decode_{field.name}"] = decode[field.name]
                value = f"_decode_{field.name}({value})"
        elif field.default is not dataclasses.MISSING:
            namespace[f"_default_{field.name}"] = field.default
            value = f"_default_{field.name}"
        else:
            raise TypeError(f"{cls.__name__}.{field.name}: no column and no default")
        lines.append(f"    {setter}(obj, {value})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # noqa: S102 (our own field names only)
    build: Callable[[Any], T] = namespace["build"]
    return build


def positions(columns: Sequence[str]) -> dict[str, int]:
    """Each column name of a projection -> its position in the row."""
    return {name: index for index, name in enumerate(columns)}


def named(columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row as ``{column: value}`` (off the hot path: the operator's reads)."""
    return dict(zip(columns, row, strict=True))


def scalar(rows: Sequence[Sequence[Any]]) -> Any:
    """The one value of a one-row, one-column answer (a count, a sum)."""
    ((value,),) = rows
    return value


STATS_COLUMNS = (
    "queue",
    "ready",
    "delayed",
    "running",
    "suspended",
    "failed",
    "dead",
    "oldest_ready_ms",
)
"""job_stats: one queue's six exclusive buckets and its oldest due row's age."""

_COUNTS = ("done", "retried", "failed", "dead", "duration_ms", "pickups", "pickup_ms")

COUNTER_TOTAL_COLUMNS = ("job", *_COUNTS)
"""counter_totals: one job name's buckets, summed."""

COUNTER_BUCKET_COLUMNS = ("job", "queue", "width_ms", "start", *_COUNTS)
"""counter_buckets: one bucket of a job name on a queue."""

WORKER_COLUMNS = (
    "id",
    "host",
    "pid",
    "queues",
    "concurrency",
    "in_flight",
    "started_at",
    "heartbeat_at",
    "expires_at",
)
"""worker_list: one registry row (``queues`` and ``in_flight`` are JSON)."""

STEP_COLUMNS = (
    "name",
    "status",
    "output",
    "error",
    "attempts",
    "started_at",
    "completed_at",
    "wake_at",
    "event",
    "correlation_key",
    "snapshot",
    "cursor_at",
    "cursor_id",
)
"""step_list: one step of a run (``output`` is JSON)."""

EVENT_COLUMNS = (
    "id",
    "name",
    "payload",
    "correlation_key",
    "published_at",
    "expires_at",
)
"""event_find: one event (``payload`` is JSON)."""


JOB_COLUMNS = (
    "id",
    "name",
    "queue",
    "input",
    "idempotency_key",
    "run_id",
    "attempt",
    "max_attempts",
    "priority",
    "state",
    "run_at",
    "created_at",
    "updated_at",
    "tenant_id",
    "last_error",
    "last_error_stack",
    "progress",
    "claimed_by",
    "claims",
    "visible_at",
    "enqueued_by",
    "traceparent",
    "claimed_at",
    "result",
    "history",
)
"""A whole job row: job_get, job_list, job_cancel and job_bury answer it."""

CLAIM_COLUMNS = (
    "id",
    "name",
    "queue",
    "input",
    "idempotency_key",
    "run_id",
    "attempt",
    "max_attempts",
    "priority",
    "state",
    "tenant_id",
    "claimed_by",
    "claims",
    "visible_at",
    "enqueued_by",
    "traceparent",
    "claimed_at",
    "retaken",
    "start_recorded",
    "run_at",
    "concurrency_key",
)
"""A claimed row (only what a worker needs): job_claim answers all but
``concurrency_key`` (its rows have none); job_claim_capped, job_claim_busy
and the heirs of job_ack_many_handover (``claim_taken``) answer them all.
``state`` tells a claimed row (``running``) from an exhausted lapse to bury
(job_claim) or a settled ack (job_ack_many_handover: ``done``); ``run_at``
is the claim order's second key."""

CLAIM = positions(CLAIM_COLUMNS)


def _claimed_input(value: Any) -> Any:
    # Most jobs take no arguments: their stored input is "{}", decoded here
    # without the JSON parser (a fresh dict each time: handlers may mutate it).
    return {} if value == "{}" else loads(value)


def _claimed_fields(*, keyed: bool) -> dict[str, int]:
    fields = {f.name for f in dataclasses.fields(ClaimedJob)}
    if not keyed:
        fields.discard("concurrency_key")
    return {name: CLAIM[name] for name in CLAIM_COLUMNS if name in fields}


claimed_plain = row_builder(
    ClaimedJob, _claimed_fields(keyed=False), decode={"input": _claimed_input}
)
"""A ``ClaimedJob`` from a job_claim row (see :func:`row_builder`: ~1 us, not ~4)."""

claimed_keyed = row_builder(
    ClaimedJob, _claimed_fields(keyed=True), decode={"input": _claimed_input}
)
"""The same from a row that carries the concurrency key (the capped claims)."""

record = row_builder(
    JobRecord,
    positions(JOB_COLUMNS),
    decode={
        "input": loads,
        "state": parse_state,
        "progress": loads,
        "result": loads,
        "history": loads,
    },
)
"""A ``JobRecord`` from a whole job row (:data:`JOB_COLUMNS`)."""
