"""The Redis driver's rows: times as integer microseconds, hashes decoded.

A job row is a hash (``lua/lib.lua`` lists where it lives) whose fields
are short names of the ``ultimate_jobs_job`` columns: ``id``, ``name``,
``queue``, ``input`` (JSON text, never decoded in Lua), ``key``, ``ten``
(tenant), ``run``, ``att``, ``max``, ``pri``, ``st``, ``at`` (run_at),
``cre``, ``upd``, ``by``, ``tp``, ``ck``/``cl`` (concurrency key and
limit), ``clm`` (claims), ``stc`` (the claim known to have started),
``cb``/``cat``/``vis`` (claimed by, at, visible until), ``err``, ``stk``,
``prog``, ``res``, ``hist`` and ``m`` (its member in the claim order).
Absent fields are ``None``; every time is microseconds since the epoch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ...states import parse_state
from ..base import ClaimedJob, JobRecord

__all__ = ["claimed", "from_us", "load_json", "opt", "pairs", "record", "to_us"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def to_us(instant: datetime) -> int:
    """``instant`` as whole microseconds since the epoch (exact)."""
    return (instant - EPOCH) // _MICRO


def from_us(value: str | int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return EPOCH + timedelta(microseconds=int(value))


def opt(value: object | None) -> str:
    """An optional script argument: ``""`` for ``None``, else ``"=" + value``."""
    return "" if value is None else f"={value}"


def pairs(flat: Sequence[str]) -> dict[str, str]:
    """A flat ``[field, value, ...]`` answer as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def load_json(text: str | None) -> Any:
    """Decode a stored JSON field (``None`` stays ``None``)."""
    return None if text is None else json.loads(text)


def _maybe_time(value: str | None) -> datetime | None:
    return None if value is None else from_us(value)


def _history(text: str | None) -> list[dict[str, Any]] | None:
    entries = load_json(text)
    if entries is None:
        return None
    for entry in entries:
        entry["at"] = from_us(entry["at"]).isoformat()
    return list(entries)


def record(row: Mapping[str, str]) -> JobRecord:
    """The row as ``get`` answers it (the state parsed, never cast)."""
    return JobRecord(
        id=UUID(row["id"]),
        name=row["name"],
        queue=row["queue"],
        input=json.loads(row["input"]),
        idempotency_key=row.get("key"),
        run_id=UUID(row["run"]),
        attempt=int(row["att"]),
        max_attempts=int(row["max"]),
        priority=int(row["pri"]),
        state=parse_state(row["st"]),
        run_at=from_us(row["at"]),
        created_at=from_us(row["cre"]),
        updated_at=from_us(row["upd"]),
        tenant_id=row.get("ten"),
        last_error=row.get("err"),
        last_error_stack=row.get("stk"),
        progress=load_json(row.get("prog")),
        claimed_by=row.get("cb"),
        claims=int(row["clm"]),
        visible_at=_maybe_time(row.get("vis")),
        enqueued_by=row.get("by"),
        traceparent=row.get("tp"),
        claimed_at=_maybe_time(row.get("cat")),
        result=load_json(row.get("res")),
        history=_history(row.get("hist")),
    )


def claimed(row: Mapping[str, str], flags: Sequence[str]) -> ClaimedJob:
    """A row the claim script handed out; ``flags`` = retaken, started, busy."""
    retaken, started, busy = (flag == "1" for flag in flags)
    return ClaimedJob(
        id=UUID(row["id"]),
        name=row["name"],
        queue=row["queue"],
        input=json.loads(row["input"]),
        run_id=UUID(row["run"]),
        attempt=int(row["att"]),
        max_attempts=int(row["max"]),
        priority=int(row["pri"]),
        claims=int(row["clm"]),
        claimed_by=row["cb"],
        visible_at=from_us(row["vis"]),
        tenant_id=row.get("ten"),
        idempotency_key=row.get("key"),
        enqueued_by=row.get("by"),
        traceparent=row.get("tp"),
        claimed_at=_maybe_time(row.get("cat")),
        run_at=_maybe_time(row.get("at")),
        retaken=retaken,
        start_recorded=started,
        concurrency_key=row.get("ck"),
        key_busy=busy,
    )
