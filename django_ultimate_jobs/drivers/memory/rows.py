"""The memory driver's rows and the pure functions over them.

Internal, like the rest of ``drivers``. :mod:`.memory` keeps these rows in
dicts under one lock; nothing here locks or reads a clock, so each function
mirrors one piece of a statement in ``sql/queries.sql`` and can be read
beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ...states import LIVE_STATES, JobState, parse_state
from ...validation import json_text
from ..base import (
    COUNTER_FIELDS,
    MAX_ERROR_STACK_LENGTH,
    ClaimedJob,
    JobFilter,
    JobRecord,
    QueueStats,
    WorkerRecord,
)

__all__ = [
    "MINUTE_MS",
    "CounterKey",
    "JobRow",
    "JobTable",
    "WorkerRegistry",
    "add_to_bucket",
    "bounded_stack",
    "dump_json",
    "error_code",
    "fold_counters",
    "load_json",
    "matches",
    "pickup_ms",
    "queue_stats",
    "result_json",
    "truncate_ms",
]

MINUTE_MS = 60_000
_FIVE_MINUTES_MS = 300_000
_HOUR_MS = 3_600_000
# The Postgres driver's MAX_WORKER_IN_FLIGHT: a registry row is a summary.
_MAX_IN_FLIGHT = 100

CounterKey = tuple[str, int, datetime, str]
"""A counter bucket: (job name, bucket width in ms, bucket start, queue)."""

_WAITING = frozenset({JobState.READY, JobState.DELAYED})
_COUNTED = frozenset(
    {
        JobState.READY,
        JobState.DELAYED,
        JobState.RUNNING,
        JobState.SUSPENDED,
        JobState.FAILED,
        JobState.DEAD,
    }
)


@dataclass(slots=True)
class JobRow:
    """One job, column for column as ``ultimate_jobs_job`` holds it.

    JSON columns hold JSON text, so every read decodes a fresh value and a
    caller mutating what it was handed cannot reach the stored row.
    """

    id: UUID
    name: str
    queue: str
    input: str
    idempotency_key: str | None
    run_id: UUID
    max_attempts: int
    priority: int
    state: str
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    tenant_id: str | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    attempt: int = 0
    claims: int = 0
    started_claim: int = 0
    """The claim whose body is known to have started (``mark_started``)."""
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    visible_at: datetime | None = None
    last_error: str | None = None
    last_error_stack: str | None = None
    progress: str | None = None
    result: str | None = None
    history: str | None = None

    def add_history(self, now: datetime, worker: str | None, error: str | None) -> None:
        """Append this attempt's entry, as the settling statements do."""
        entries = load_json(self.history) or []
        entry: dict[str, Any] = {
            "attempt": self.attempt,
            "worker": worker,
            "at": now.isoformat(),
        }
        if error is not None:
            entry["error"] = error
        entries.append(entry)
        self.history = json.dumps(entries)

    def add_retry(self, now: datetime, from_step: str | None) -> None:
        """Append the operator's retry, as the requeue statements do."""
        entries = load_json(self.history) or []
        entry: dict[str, Any] = {"event": "retried", "at": now.isoformat()}
        if from_step is not None:
            entry["from_step"] = from_step
        entries.append(entry)
        self.history = json.dumps(entries)

    @property
    def key(self) -> tuple[str, str, str] | None:
        """The idempotency namespace entry, or ``None`` (never conflicts)."""
        if self.idempotency_key is None:
            return None
        return (self.name, self.tenant_id or "", self.idempotency_key)

    def claim_order(self) -> tuple[int, datetime, int]:
        """The claim's sort key: priority desc, then run_at, then id."""
        # UUIDs compare as 128-bit integers, which is PostgreSQL's byte order.
        return (-self.priority, self.run_at, self.id.int)

    def owned_by(self, worker_id: str, claim: int) -> bool:
        """The three-part fence every write of an attempt presents."""
        return (
            self.state == JobState.RUNNING
            and self.claimed_by == worker_id
            and self.claims == claim
        )

    def record(self) -> JobRecord:
        """The row as ``job_get`` answers it (the state is parsed, not cast)."""
        return JobRecord(
            id=self.id,
            name=self.name,
            queue=self.queue,
            input=load_json(self.input),
            idempotency_key=self.idempotency_key,
            run_id=self.run_id,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            priority=self.priority,
            state=parse_state(self.state),
            run_at=self.run_at,
            created_at=self.created_at,
            updated_at=self.updated_at,
            tenant_id=self.tenant_id,
            last_error=self.last_error,
            last_error_stack=self.last_error_stack,
            progress=load_json(self.progress),
            claimed_by=self.claimed_by,
            claims=self.claims,
            visible_at=self.visible_at,
            enqueued_by=self.enqueued_by,
            traceparent=self.traceparent,
            claimed_at=self.claimed_at,
            result=load_json(self.result),
            history=load_json(self.history),
        )

    def claimed(self) -> ClaimedJob:
        """The row handed to the worker that just claimed it."""
        assert self.claimed_by is not None and self.visible_at is not None
        return ClaimedJob(
            id=self.id,
            name=self.name,
            queue=self.queue,
            input=load_json(self.input),
            idempotency_key=self.idempotency_key,
            run_id=self.run_id,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            priority=self.priority,
            tenant_id=self.tenant_id,
            claimed_by=self.claimed_by,
            claims=self.claims,
            visible_at=self.visible_at,
            enqueued_by=self.enqueued_by,
            traceparent=self.traceparent,
            claimed_at=self.claimed_at,
            run_at=self.run_at,
        )


class JobTable:
    """The job rows by id, with the two indexes the statements rely on.

    ``live`` holds the live rows (what a claim scans, since done rows grow
    without bound) and the key index mirrors the schema's partial unique
    index on (name, tenant, key) over live rows. :meth:`move` keeps both in
    step with every state change.
    """

    def __init__(self) -> None:
        self.rows: dict[UUID, JobRow] = {}
        self.live: dict[UUID, JobRow] = {}
        self._keys: dict[tuple[str, str, str], JobRow] = {}

    def holder(self, row: JobRow) -> JobRow | None:
        """The live row holding ``row``'s key, other than ``row`` itself."""
        holder = self._keys.get(row.key) if row.key is not None else None
        return None if holder is row else holder

    def add(self, row: JobRow) -> None:
        """Insert a new row (its key must be free if it is live)."""
        self.rows[row.id] = row
        if row.state in LIVE_STATES:
            self._index(row)

    def delete(self, row: JobRow) -> None:
        """Forget a row."""
        if row.state in LIVE_STATES:
            self._unindex(row)
        del self.rows[row.id]

    def move(self, row: JobRow, state: JobState) -> None:
        """Set the row's state, keeping the indexes in step."""
        was_live = row.state in LIVE_STATES
        row.state = state.value
        if was_live and state not in LIVE_STATES:
            self._unindex(row)
        elif state in LIVE_STATES and not was_live:
            self._index(row)

    def _index(self, row: JobRow) -> None:
        self.live[row.id] = row
        if row.key is not None:
            self._keys[row.key] = row

    def _unindex(self, row: JobRow) -> None:
        del self.live[row.id]
        if row.key is not None:
            del self._keys[row.key]


class WorkerRegistry:
    """Worker rows as ``ultimate_jobs_worker`` holds them (by id)."""

    def __init__(self) -> None:
        self._rows: dict[str, WorkerRecord] = {}

    def announce(self, worker: WorkerRecord, now: datetime, ttl_ms: int) -> None:
        """``worker_announce``: a re-announce keeps the first host, pid,
        queues, concurrency and start; in-flight ids and times move."""
        expires_at = now + timedelta(milliseconds=ttl_ms)
        in_flight = list(worker.in_flight[:_MAX_IN_FLIGHT])
        known = self._rows.get(worker.id)
        if known is None:
            known = replace(worker, queues=list(worker.queues), started_at=now)
        self._rows[worker.id] = replace(
            known, in_flight=in_flight, heartbeat_at=now, expires_at=expires_at
        )

    def refresh(self, worker_id: str, now: datetime, ttl_ms: int) -> None:
        """The idle claim's refresh of an existing row (nothing in flight)."""
        known = self._rows.get(worker_id)
        if known is not None:
            expires_at = now + timedelta(milliseconds=ttl_ms)
            self._rows[worker_id] = replace(
                known, in_flight=[], heartbeat_at=now, expires_at=expires_at
            )

    def forget(self, worker_id: str) -> None:
        """``worker_forget``."""
        self._rows.pop(worker_id, None)

    def live(self, now: datetime) -> list[WorkerRecord]:
        """``worker_list``: lapsed rows are deleted, the rest sorted by id."""
        for worker_id in [w.id for w in self._rows.values() if w.expires_at <= now]:
            del self._rows[worker_id]
        return [
            replace(w, queues=list(w.queues), in_flight=list(w.in_flight))
            for _, w in sorted(self._rows.items())
        ]


def dump_json(value: Any) -> str:
    """Encode ``value`` as the Postgres driver binds JSON, refusing what the
    bind or jsonb would refuse there.

    Raises:
        JsonRefused: a ``ValueError``; see
            :func:`~django_ultimate_jobs.validation.json_text`.
    """
    return json_text(value, exact=False)


def load_json(text: str | None) -> Any:
    """Decode a stored JSON column (``None`` stays ``None``)."""
    return None if text is None else json.loads(text)


def result_json(value: Any) -> str | None:
    """A handler's result as stored by an ack: ``None`` when not JSON-safe."""
    if value is None:
        return None
    try:
        return dump_json(value)
    except ValueError:
        return None


def bounded_stack(stack: str | None) -> str | None:
    """Keep the last ``MAX_ERROR_STACK_LENGTH`` characters (the frames nearest
    the raise are at the end)."""
    if stack is None or len(stack) <= MAX_ERROR_STACK_LENGTH:
        return stack
    return stack[-MAX_ERROR_STACK_LENGTH:]


def matches(row: JobRow, where: JobFilter) -> bool:
    """Whether ``row`` passes the filter, as the listing statements test it."""
    return (
        (where.states is None or row.state in where.states)
        and (where.queue is None or row.queue == where.queue)
        and (where.name is None or row.name == where.name)
        and (where.tenant_id is None or row.tenant_id == where.tenant_id)
        and (where.id_min is None or row.id.int >= where.id_min.int)
        and (where.id_max is None or row.id.int <= where.id_max.int)
        and (where.created_from is None or row.created_at >= where.created_from)
        and (where.created_to is None or row.created_at < where.created_to)
        and (where.error_code is None or error_code(row.last_error) == where.error_code)
    )


def error_code(last_error: str | None) -> str | None:
    """``split_part(last_error, ':', 1)``: what the dead-letter page groups by.

    ``X_CODE`` of ``X_CODE: cause``, ``ValueError`` of ``ValueError: ...``,
    and the whole text of an error without a message (``RuntimeError``).
    """
    return None if last_error is None else last_error.split(":", 1)[0]


def truncate_ms(instant: datetime) -> datetime:
    """``date_trunc('milliseconds', instant)``."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def queue_stats(rows: Iterable[JobRow], now: datetime) -> list[QueueStats]:
    """Depth per queue in the six exclusive buckets of ``job_stats``."""
    counts: dict[str, dict[str, int]] = {}
    oldest: dict[str, datetime] = {}
    for row in rows:
        if row.state not in _COUNTED:
            continue
        queue = counts.setdefault(row.queue, dict.fromkeys(_BUCKETS, 0))
        if row.state in _WAITING:
            # A due row is ready whatever state it was written in; a retry
            # in backoff (ready, run_at ahead) is delayed.
            due = row.run_at <= now
            queue["ready" if due else "delayed"] += 1
            if due and (row.queue not in oldest or row.run_at < oldest[row.queue]):
                oldest[row.queue] = row.run_at
        else:
            queue[row.state] += 1
    return [
        QueueStats(
            queue=name,
            **counts[name],
            oldest_ready_ms=_age_ms(now - oldest[name]) if name in oldest else None,
        )
        for name in sorted(counts)  # code-point order, like COLLATE "C"
    ]


_BUCKETS = ("ready", "delayed", "running", "suspended", "failed", "dead")


def _age_ms(age: timedelta) -> int:
    # (extract(epoch ...) * 1000)::bigint rounds half away from zero.
    micros = age // timedelta(microseconds=1)
    return (micros + 500) // 1000


def add_to_bucket(
    buckets: dict[CounterKey, dict[str, int]], row: JobRow, now: datetime, **deltas: int
) -> None:
    """Upsert the row's job and queue's current 1-minute bucket, adding ``deltas``."""
    start = now.replace(second=0, microsecond=0)
    _add(buckets, (row.name, MINUTE_MS, start, row.queue), deltas)


def pickup_ms(row: JobRow) -> int:
    """The claimed row's pickup latency: from due (``run_at``) to claimed."""
    if row.claimed_at is None:
        return 0
    return _age_ms(max(row.claimed_at - row.run_at, timedelta(0)))


def fold_counters(buckets: dict[CounterKey, dict[str, int]], now: datetime) -> int:
    """Fold counter tiers as ``counter_rollup`` does; answers buckets moved.

    The statement decides every tier from one snapshot, so a bucket a tier
    creates is not folded again by the next tier until the following call.
    """
    minutes = _older(buckets, MINUTE_MS, now - timedelta(hours=24))
    fives = _older(buckets, _FIVE_MINUTES_MS, now - timedelta(days=7))
    hours = _older(buckets, _HOUR_MS, now - timedelta(days=30))
    for key in minutes:
        job, _, start, queue = key
        five = start.replace(minute=start.minute - start.minute % 5, second=0)
        _add(buckets, (job, _FIVE_MINUTES_MS, five, queue), buckets.pop(key))
    for key in fives:
        job, _, start, queue = key
        hour = start.replace(minute=0, second=0, microsecond=0)
        _add(buckets, (job, _HOUR_MS, hour, queue), buckets.pop(key))
    for key in hours:
        del buckets[key]
    return len(minutes) + len(fives) + len(hours)


def _older(
    buckets: dict[CounterKey, dict[str, int]], width_ms: int, cutoff: datetime
) -> list[CounterKey]:
    return [key for key in buckets if key[1] == width_ms and key[2] < cutoff]


def _add(
    buckets: dict[CounterKey, dict[str, int]], key: CounterKey, deltas: dict[str, int]
) -> None:
    bucket = buckets.setdefault(key, dict.fromkeys(COUNTER_FIELDS, 0))
    for name, value in deltas.items():
        bucket[name] += value
