"""The Postgres driver: named raw SQL through the Django connection.

Statements run on ``connections[using]``, so inside ``transaction.atomic()``
an enqueue joins the caller's transaction (it commits or rolls back with
the business write, and its NOTIFY is delivered at commit). Each method is
one round trip unless its docstring says otherwise. The roles are objects of
their own modules: ``cron`` (:mod:`.cron`), ``steps`` and ``events``
(:mod:`.steps`), ``leases`` (:mod:`.leases`), ``maintenance``
(:mod:`.maintenance`), ``sessions`` (:mod:`.sessions`); the LISTEN thread is
:mod:`.listener`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, cast
from uuid import UUID

import psycopg
from django.db import DatabaseError, IntegrityError, connections, transaction
from psycopg.abc import Loader

from ...clock import Clock, system_clock
from ...errors import (
    DriverUnavailable,
    JobDuplicate,
    JobNotCancellable,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
)
from ...ids import ids_or_new, monotonic_uuid7
from ...states import FINISHED_STATES, parse_state
from ...validation import storable
from ..base import (
    AckRequest,
    BulkResult,
    ClaimedJob,
    ClaimIdentity,
    ClaimOptions,
    ClaimResult,
    CounterBucket,
    CounterTotal,
    Enqueued,
    EnqueueRequest,
    Handover,
    JobFilter,
    JobRecord,
    NackRequest,
    PausedName,
    QueueStats,
    Renewed,
    WakeCallback,
    WorkerRecord,
    nack_state,
)
from ..basedriver import BaseDriver
from ..features import DriverFeatures
from ..steps import step_not_found
from .claims import PostgresClaims, claim_order
from .cron import PostgresCron
from .failures import coded_failure
from .jsonb import dumps as _json
from .jsonb import loads as _loads
from .leases import PostgresLeases
from .listener import WakeListener as PostgresListener
from .maintenance import PostgresMaintenance
from .params import (
    array_literal,
    bounded_stack,
    dedupe,
    filter_params,
    input_text,
    key_of,
    many_row,
    nack_outcome,
    result_json,
    storable_or_none,
)
from .prepare import EXPLICIT_PREPARE_ONLY, prepare_explicit_only
from .rows import (
    CLAIM,
    COUNTER_BUCKET_COLUMNS,
    COUNTER_TOTAL_COLUMNS,
    STATS_COLUMNS,
    WORKER_COLUMNS,
    claimed_keyed,
    named,
    record,
    scalar,
)
from .sessions import PostgresConnectivity
from .sql import query
from .steps import PostgresEvents, PostgresSteps

if TYPE_CHECKING:
    from ...conf import JobsSettings

__all__ = ["PostgresDriver", "coded_failure"]

# An insert that found a conflict is retried once: a holder that settled
# between the insert and the lookup frees the key (upstream ENQUEUE_ATTEMPTS).
_ENQUEUE_ROUNDS = 2
_GENERIC_PLAN_CONNECTIONS: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
"""Connections already switched to generic plans (see ``_rows``)."""
MAX_WORKER_IN_FLIGHT = 100
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
_PSYCOPG_TZ_LOADER = cast(
    "type[Loader]",
    psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT),
)
"""psycopg's own timestamptz loader (C with psycopg[binary]); see ``_fast_loaders``."""
_ID, _STATE = CLAIM["id"], CLAIM["state"]


class PostgresDriver(BaseDriver):
    """Jobs in PostgreSQL tables, reached through a Django database alias."""

    name = "postgres"
    features = DriverFeatures(
        wake_listener=True,
        joins_caller_transaction=True,
        atomic_steps=True,
        transactional_events=True,
        slot_handover=True,
        orm_tables=True,
        django_database=True,
        shared_across_processes=True,
    )
    sessions: PostgresConnectivity

    def __init__(
        self,
        using: str = "default",
        clock: Clock = system_clock,
        *,
        prepare: bool = True,
    ) -> None:
        self.using = using
        self.clock = clock
        self.prepare = prepare
        self.steps = PostgresSteps(self)
        self.events = PostgresEvents(self)
        self.leases = PostgresLeases(self)
        self.cron = PostgresCron(self)
        self.maintenance = PostgresMaintenance(self)
        self.sessions = PostgresConnectivity(
            using, self.use_generic_plans_in_this_thread
        )
        self._generic_plan_threads: set[int] = set()
        self._claims = PostgresClaims(self)
        self._local = threading.local()

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> Self:
        """On ``ULTIMATE_JOBS["DATABASE"]``, preparing unless ``PREPARE`` is off."""
        return cls(using=settings.database, prepare=settings.prepare)

    @property
    def alias(self) -> str:  # type: ignore[override]
        """The Django database alias of the job tables (``using``)."""
        return self.using

    def now(self) -> datetime:
        """The frozen instant of a test clock, else the database's ``now()``."""
        frozen = self.clock.sql_now()
        if frozen is not None:
            return frozen
        with connections[self.using].cursor() as cursor:
            cursor.execute("SELECT now()")
            (instant,) = cursor.fetchone()
        return cast(datetime, instant)

    def wake_listener(
        self,
        on_wake: WakeCallback,
        *,
        worker_id: str,
        on_live: Callable[[bool], None] | None = None,
    ) -> PostgresListener:
        """The LISTEN thread (:mod:`.listener`), its connections named ``listen``."""
        return PostgresListener(
            self.using,
            on_wake=on_wake,
            on_live=on_live,
            role=self.sessions.open("listen", worker_id=worker_id),
        )

    def use_generic_plans_in_this_thread(self) -> None:
        """Plan this thread's prepared statements generically (the claim loop).

        PostgreSQL's default kept re-planning the claim, because with a
        known LIMIT a custom plan looks cheaper on paper: 1.2 ms of planning
        per claim, a fifth of its cost. The claim finds its partial indexes
        through literal predicates, so the generic plan uses the same ones.
        Only the worker's claim loop asks for this: the session setting also
        governs unprepared statements with parameters, and the operator's
        listing, whose filters are optional, needs a plan per call.
        """
        self._generic_plan_threads.add(threading.get_ident())

    # -- plumbing ------------------------------------------------------------

    def _rows(
        self,
        name: str,
        params: Mapping[str, Any],
        *,
        prepare: bool = True,
        filename: str = "queries.sql",
    ) -> list[tuple[Any, ...]]:
        connection = connections[self.using]
        connection.ensure_connection()
        connection.validate_no_broken_transaction()
        # A server-binding cursor on Django's own psycopg connection: the
        # statement runs in the caller's transaction like any Django query,
        # and prepare=True lets PostgreSQL plan each CTE once per connection
        # instead of on every call (the client-binding cursors Django uses
        # by default cannot prepare; planning was most of an enqueue).
        raw = connection.connection
        if self.prepare:
            prepare_explicit_only(raw)  # Django turns preparing off (None)
        if (
            threading.get_ident() in self._generic_plan_threads
            and raw not in _GENERIC_PLAN_CONNECTIONS
            and raw.prepare_threshold == EXPLICIT_PREPARE_ONLY
            and not connection.in_atomic_block
        ):
            # See use_generic_plans_in_this_thread(). Checked per call, so a
            # reconnected claim loop gets it again; outside a transaction, so
            # the SET is not rolled back with one.
            raw.execute("SET plan_cache_mode = force_generic_plan")
            _GENERIC_PLAN_CONNECTIONS.add(raw)
        # One cursor per thread, connection and pair of time zones, kept:
        # building one per statement (and its adapters map) was a tenth of an
        # enqueue. The zones decide its timestamptz loader (_fast_loaders);
        # a setting change or a SET TIME ZONE gets a new cursor. The
        # session's zone is compared by the name the server reported
        # (raw.info builds a ConnectionInfo and looks a tzinfo up per read).
        zones = (connection.timezone, raw.pgconn.parameter_status(b"TimeZone"))
        kept = self._local.__dict__.get("cursor")
        if kept is None or kept[0] is not raw or kept[1] != zones:
            kept = self._local.cursor = (raw, zones, psycopg.Cursor(raw))
            _fast_loaders(connection, kept[2])
        cursor = kept[2]
        try:
            with connection.wrap_database_errors:
                cursor.execute(
                    query(name, filename),
                    {"now": self.clock.sql_now(), **params},
                    prepare=self.prepare and prepare,
                )
                # Not cursor.description: it builds a Column per column on
                # every call (a twentieth of the claim loop in a py-spy
                # profile, bench/README.md); the result's status says the same.
                result = cursor.pgresult
                if result is None or result.status != _TUPLES_OK:
                    return []
                return cursor.fetchall()
        except DatabaseError as error:
            # Looked at only once a statement failed: the hot path pays
            # nothing for a clear answer.
            coded = coded_failure(self.using, error)
            if coded is None:
                raise
            raise coded from error

    # -- enqueue -------------------------------------------------------------

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        """Insert one job, or answer the live holder of its key."""
        job_id = request.id or monotonic_uuid7()
        run_id = request.run_id or job_id
        params = {
            "id": job_id,
            "run_id": run_id,
            "name": request.name,
            "queue": request.queue,
            "input": input_text(request),
            "key": request.idempotency_key,
            "max_attempts": request.max_attempts,
            "priority": request.priority,
            "run_at": request.run_at,
            "delay_ms": request.delay_ms,
            "tenant_id": request.tenant_id,
            "enqueued_by": request.enqueued_by,
            "traceparent": request.traceparent,
            "concurrency_key": request.concurrency_key,
            "concurrency_limit": request.concurrency_limit,
        }
        # A fresh id without a key can meet neither its id nor a live key.
        fresh = request.idempotency_key is None and request.id is None
        statement = "job_enqueue_keyless" if fresh else "job_enqueue"
        for _ in range(_ENQUEUE_ROUNDS):
            rows = self._rows(statement, params)
            if rows:
                job_id, run_id, created_at, _notified = rows[0]
                return Enqueued(job_id, run_id, False, created_at)
            if request.id is not None:
                existing = self.get(request.id)
                if existing is not None:
                    return Enqueued(existing.id, existing.run_id, True)
            holders = self._live_holders([request])
            holder = holders.get(key_of(request))
            if holder is not None:
                return dedupe(request, holder)
        raise DriverUnavailable(
            "an enqueue met a conflict twice but found no live holder of its key",
            fix="python manage.py migrate ultimate_jobs (the index and the lookup disagree)",
        )

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many jobs in one statement; dedupes resolved in a second."""
        if not requests:
            return []
        ids = ids_or_new([r.id for r in requests])
        rows = [
            many_row(index, job_id, r)
            for index, (job_id, r) in enumerate(zip(ids, requests, strict=True))
        ]
        statement = (
            "job_enqueue_many_keyless"
            if all(r.idempotency_key is None for r in requests)
            else "job_enqueue_many"
        )
        strict = any(r.on_conflict == "error" for r in requests)
        # A refusal under on_conflict="error" must leave nothing written, so
        # the batch then runs in its own (sub)transaction.
        with transaction.atomic(using=self.using) if strict else nullcontext():
            inserted = {
                job_id
                for job_id, _notified in self._rows(statement, {"rows": _json(rows)})
            }
            answers: list[Enqueued | None] = [
                Enqueued(job_id, r.run_id or job_id, False)
                if job_id in inserted
                else None
                for job_id, r in zip(ids, requests, strict=True)
            ]
            missing = [i for i, answer in enumerate(answers) if answer is None]
            if missing:
                self._resolve_missing(requests, answers, missing)
        return [answer for answer in answers if answer is not None]

    def _resolve_missing(
        self,
        requests: Sequence[EnqueueRequest],
        answers: list[Enqueued | None],
        missing: list[int],
    ) -> None:
        keyed = [
            requests[i] for i in missing if requests[i].idempotency_key is not None
        ]
        holders = self._live_holders(keyed) if keyed else {}
        for i in missing:
            request = requests[i]
            if request.id is not None:
                existing = self.get(request.id)
                if existing is not None:
                    answers[i] = Enqueued(existing.id, existing.run_id, True)
                    continue
            holder = holders.get(key_of(request))
            if holder is None:
                # The holder settled between the statements: insert alone.
                answers[i] = self.enqueue(request)
            else:
                answers[i] = dedupe(request, holder)

    def _live_holders(
        self, requests: Sequence[EnqueueRequest]
    ) -> dict[tuple[str, str, str], tuple[UUID, UUID]]:
        rows = self._rows(
            "job_live_holders",
            {
                "names": [r.name for r in requests],
                "tenants": [r.tenant_id or "" for r in requests],
                "keys": [r.idempotency_key for r in requests],
            },
        )
        return {
            (name, tenant, key): (job_id, run_id)
            for job_id, run_id, name, tenant, key in rows
        }

    # -- claim and settle ----------------------------------------------------

    def claim(self, options: ClaimOptions) -> ClaimResult:
        """Claim due jobs; re-take lapsed leases; bury lapsed final attempts
        (:meth:`.claims.PostgresClaims.claim`)."""
        return self._claims.claim(options)

    def ack_many(self, requests: Sequence[AckRequest]) -> list[bool]:
        """Settle successful attempts, one statement per worker; answers in order."""
        return self.ack_many_handover(requests, None)[0]

    def ack_many_handover(
        self, requests: Sequence[AckRequest], handover: Handover | None
    ) -> tuple[list[bool], list[ClaimedJob]]:
        """:meth:`ack_many`, and with ``handover`` a settled capped row's slot
        goes to its key's next ready row, claimed here for
        ``handover.worker_id`` (``job_ack_many_handover``): answers whether
        each ack landed, in order, and the rows claimed."""
        if not requests:
            return [], []
        by_worker: dict[str, list[AckRequest]] = {}
        for request in requests:
            by_worker.setdefault(request.identity.worker_id, []).append(request)
        landed: set[int] = set()
        claimed: list[ClaimedJob] = []
        for worker, batch in by_worker.items():
            results = [(r.job_id, result_json(r.result)) for r in batch]
            results = [(job_id, text) for job_id, text in results if text is not None]
            params: dict[str, Any] = {
                "worker": worker,
                "ids": array_literal([r.job_id for r in batch]),
                "claims": array_literal([r.identity.claim for r in batch]),
                "durations": array_literal([r.duration_ms for r in batch]),
                "uncounted": [r.job_id for r in batch if not r.counted],
                "result_ids": [job_id for job_id, _ in results],
                "results": [text for _, text in results],
            }
            room = 0 if handover is None else handover.limit - len(claimed)
            if handover is None or worker != handover.worker_id or room <= 0:
                rows = self._rows("job_ack_many", params)
                landed.update(job_id.int for (job_id,) in rows)
                continue
            rows = self._rows(
                "job_ack_many_handover",
                {
                    **params,
                    "queues": list(handover.queues),
                    "visibility_ms": handover.visibility_ms,
                    "handover": room,
                    "release": list(handover.release),
                },
            )
            # The settled rows (state "done") and the heirs claimed for them
            # (state "running") come in one result, both as CLAIM_COLUMNS.
            landed.update(row[_ID].int for row in rows if row[_STATE] == "done")
            heirs = [row for row in rows if row[_STATE] == "running"]
            heirs.sort(key=claim_order)
            claimed += [claimed_keyed(row) for row in heirs]
        # Compared as integers: UUID.__hash__ is Python code, two per acked
        # job here (the settler thread's share of a no-op job).
        return [r.job_id.int in landed for r in requests], claimed

    def nack(self, request: NackRequest) -> bool:
        """Hand one attempt back; True if it landed."""
        state = nack_state(request)
        rows = self._rows(
            "job_nack",
            {
                "id": request.job_id,
                "worker": request.identity.worker_id,
                "claim": request.identity.claim,
                "state": state.value,
                "counts_as_attempt": request.counts_as_attempt,
                "delay_ms": request.delay_ms,
                "run_at": request.run_at,
                # An exception's message is the app's text: a NUL or a lone
                # surrogate in it must not fail the settle (the job would
                # stay running until its lease lapsed, then run again).
                "error": storable_or_none(request.error),
                "stack": storable_or_none(bounded_stack(request.stack)),
                "outcome": nack_outcome(request),
                "duration_ms": request.duration_ms,
            },
        )
        return bool(rows)

    def heartbeat_many(
        self,
        held: Iterable[tuple[UUID, ClaimIdentity | None]],
        *,
        visibility_ms: int,
    ) -> Renewed:
        """Extend many leases (and their slots) in one statement; see ``Renewed``."""
        pairs = list(held)
        if not pairs:
            return Renewed()
        rows = self._rows(
            "job_heartbeat_many",
            {
                "ids": [job_id for job_id, _ in pairs],
                "workers": [i.worker_id if i else None for _, i in pairs],
                "claims": [i.claim if i else None for _, i in pairs],
                "visibility_ms": visibility_ms,
            },
        )
        return Renewed(
            (job_id for job_id, _slot_held in rows),
            (job_id for job_id, slot_held in rows if not slot_held),
        )

    def mark_started(self, job_id: UUID, identity: ClaimIdentity) -> bool:
        """Record that this claim's body starts now; fenced. True if it landed."""
        rows = self._rows(
            "job_mark_started",
            {"id": job_id, "worker": identity.worker_id, "claim": identity.claim},
        )
        return bool(rows)

    def record_progress(
        self, job_id: UUID, identity: ClaimIdentity, progress: Mapping[str, Any]
    ) -> bool:
        """Store progress on a running job (fenced); True if it landed."""
        rows = self._rows(
            "job_progress",
            {
                "id": job_id,
                "worker": identity.worker_id,
                "claim": identity.claim,
                "progress": _json(progress),
            },
        )
        return bool(rows)

    # -- reads ---------------------------------------------------------------

    def stats(self) -> list[QueueStats]:
        """Depth per queue in six exclusive buckets, sorted by queue name."""
        return [
            QueueStats(**named(STATS_COLUMNS, row))
            for row in self._rows("job_stats", {})
        ]

    def get(self, job_id: UUID) -> JobRecord | None:
        """Return one job row, or ``None``."""
        rows = self._rows("job_get", {"id": job_id})
        return record(rows[0]) if rows else None

    # -- operator verbs ------------------------------------------------------

    def requeue(self, job_id: UUID, *, from_step: str | None = None) -> JobRecord:
        """Make a finished job ready again (attempt 0, due now)."""
        step = from_step
        if step is not None and not storable(step):
            # PostgreSQL refuses the parameter; no step can hold it either,
            # nor be named "" (step names are non-empty), so "" is refused
            # as unknown, after the same checks as any other name.
            step = ""
        try:
            rows = self._rows("job_requeue", {"id": job_id, "from_step": step})
        except IntegrityError as error:
            # A live job took the key between the holder check and the write.
            raise JobDuplicate(
                "a live job holds this job's idempotency key",
                fix="wait for the live job to finish, then retry this one",
                meta={"id": str(job_id)},
            ) from error
        if not rows:
            raise JobNotFound("no job has that id", meta={"id": str(job_id)})
        state, moved, holder, step_known, run_id, _dropped, _woke = rows[0]
        if moved:
            record = self.get(job_id)
            assert record is not None
            return record
        if holder is not None:
            raise JobDuplicate(
                "a live job holds this job's idempotency key",
                fix=f"python manage.py jobs show {holder}",
                meta={"id": str(job_id), "holder": str(holder)},
            )
        if not step_known and parse_state(state) in FINISHED_STATES:
            assert from_step is not None
            raise step_not_found(job_id, from_step, self.steps.list(run_id).values())
        raise JobNotRequeueable(
            f"the job is {parse_state(state).value}; only finished jobs can be retried",
            meta={"id": str(job_id), "state": state},
        )

    def promote(self, job_id: UUID) -> JobRecord:
        """Make a ready or delayed job due now, and wake its queue."""
        rows = self._rows("job_promote", {"id": job_id})
        if not rows:
            raise JobNotFound("no job has that id", meta={"id": str(job_id)})
        state, moved, _woke = rows[0]
        if not moved:
            raise JobNotPromotable(
                f"the job is {parse_state(state).value}, not waiting on its run time",
                meta={"id": str(job_id), "state": state},
            )
        record = self.get(job_id)
        assert record is not None
        return record

    def cancel(self, job_id: UUID, *, reason: str | None = None) -> JobRecord:
        """Cancel a live job; a running one loses its fence at once."""
        rows = self._rows("job_cancel", {"id": job_id, "reason": reason})
        if not rows:
            raise JobNotCancellable(
                "the job is finished or unknown", meta={"id": str(job_id)}
            )
        return record(rows[0])

    def remove(self, job_id: UUID) -> bool:
        """Delete a job that is not running, with its steps."""
        removed, _steps, state = self._rows("job_remove", {"id": job_id})[0]
        if removed:
            return True
        if state == "running":
            raise JobNotRemovable(
                "the job is running", meta={"id": str(job_id), "state": state}
            )
        return False

    def list_jobs(
        self, where: JobFilter, *, before: UUID | None, limit: int
    ) -> list[JobRecord]:
        """One page of jobs, newest first, after ``before``."""
        params = {**filter_params(where), "before": before, "limit": limit}
        if where.states is None:
            params["states"] = None
        # Unprepared: each call's filters get their own plan.
        return [record(row) for row in self._rows("job_list", params, prepare=False)]

    def count(self, where: JobFilter) -> int:
        """How many jobs match ``where`` (one ``count(*)``)."""
        # Unprepared, like the listing: the states asked for pick the index.
        return int(scalar(self._rows("job_count", filter_params(where), prepare=False)))

    def requeue_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Requeue up to ``limit`` finished rows, oldest first."""
        return self._bulk("job_requeue_many", where, limit)

    def remove_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Delete up to ``limit`` rows that are not running, with their steps."""
        return self._bulk("job_remove_many", where, limit)

    def promote_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Make up to ``limit`` waiting rows due now, and wake their queues."""
        return self._bulk("job_promote_many", where, limit)

    def _bulk(self, name: str, where: JobFilter, limit: int) -> BulkResult:
        params = {**filter_params(where), "limit": limit}
        # affected, remaining, and what came with them (woken queues, steps).
        ((affected, remaining, _with),) = self._rows(name, params, prepare=False)
        return BulkResult(affected=int(affected), remaining=int(remaining))

    def counter_totals(self, since: datetime) -> list[CounterTotal]:
        """Per job name, the counter buckets from ``since`` on, summed."""
        return [
            CounterTotal(**named(COUNTER_TOTAL_COLUMNS, row))
            for row in self._rows("counter_totals", {"since": since})
        ]

    def counter_buckets(self, since: datetime) -> list[CounterBucket]:
        """Every counter bucket from ``since`` on (start, job, queue order)."""
        return [
            CounterBucket(**named(COUNTER_BUCKET_COLUMNS, row))
            for row in self._rows("counter_buckets", {"since": since})
        ]

    def pause_queue(self, queue: str) -> list[PausedName]:
        """Pause ``queue``; answers the paused list after the write."""
        return self._pause("queue", queue)

    def resume_queue(self, queue: str) -> list[PausedName]:
        """Resume ``queue`` and wake it; answers the paused list after the write."""
        self._rows("queue_resume", {"name": queue})
        return self.paused_queues()

    def paused_queues(self) -> list[PausedName]:
        """Paused queues sorted by name."""
        return self._paused("queue")

    def _pause(self, kind: str, name: str) -> list[PausedName]:
        # Queues and cron tasks pause alike: a QueuePause row of their kind.
        self._rows("pause_add", {"kind": kind, "name": name})
        return self._paused(kind)

    def _paused(self, kind: str) -> list[PausedName]:
        return [
            PausedName(name, at)
            for name, at in self._rows("pause_list", {"kind": kind})
        ]

    def announce_worker(self, worker: WorkerRecord, *, ttl_ms: int) -> None:
        """Insert or refresh a worker's registry row."""
        self._rows(
            "worker_announce",
            {
                "id": worker.id,
                "host": worker.host,
                "pid": worker.pid,
                "queues": _json(worker.queues),
                "concurrency": worker.concurrency,
                "in_flight": _json(worker.in_flight[:MAX_WORKER_IN_FLIGHT]),
                "ttl_ms": ttl_ms,
            },
        )

    def forget_worker(self, worker_id: str) -> None:
        """Delete a worker's registry row."""
        self._rows("worker_forget", {"id": worker_id})

    def workers(self) -> list[WorkerRecord]:
        """Live workers sorted by id; lapsed rows are deleted by the read."""
        workers = []
        for row in self._rows("worker_list", {}):
            worker = named(WORKER_COLUMNS, row)
            worker["queues"] = _loads(worker["queues"])
            worker["in_flight"] = _loads(worker["in_flight"])
            workers.append(WorkerRecord(**worker))
        return workers

    def close(self) -> None:
        """Nothing to release: connections belong to Django."""


# -- row decoding -------------------------------------------------------------


def _fast_loaders(connection: Any, cursor: psycopg.Cursor[Any]) -> None:
    # Django loads timestamptz through a Python subclass that re-stamps the
    # tzinfo of every value (django/db/backends/postgresql/psycopg_any.py):
    # three per claimed row, the claim loop's largest decode cost in a py-spy
    # profile (bench/README.md). When Django's zone and the session's are
    # both UTC, psycopg's own loader answers the very same datetimes (same
    # tzinfo object), so this cursor uses it; any other zone keeps Django's.
    if connection.timezone is UTC and cursor.connection.info.timezone is UTC:
        cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _PSYCOPG_TZ_LOADER)
