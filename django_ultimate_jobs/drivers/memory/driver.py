"""The memory driver: the Postgres driver's semantics in one process.

Internal, like the rest of ``drivers``. For tests and local development:
every method answers exactly what the statement of the same purpose in
``sql/queries.sql`` answers, and the conformance suite
(``django_ultimate_jobs.testing.conformance``) runs against both drivers to
keep it so. One lock guards all state, because a worker calls in from many
threads; each call reads the clock once, as a statement reads ``now()``
once. There is no LISTEN: rows that become due wake this process's loops
through :data:`~django_ultimate_jobs.wake.wake_hub` directly.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ...clock import Clock, system_clock
from ...errors import (
    ClaimQueuesEmpty,
    JobDuplicate,
    JobNotCancellable,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
)
from ...ids import monotonic_uuid7
from ...states import FINISHED_STATES, PROMOTABLE_STATES, JobState
from ...wake import wake_hub
from ..base import (
    LEASE_LAPSED_FINAL_ATTEMPT,
    LEASE_LAPSED_RECLAIMED,
    LEASE_LAPSED_UNSTARTED,
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
    JobFilter,
    JobRecord,
    NackRequest,
    PausedName,
    QueueStats,
    Renewed,
    WorkerRecord,
    nack_state,
)
from ..basedriver import BaseDriver
from ..features import DriverFeatures
from ..steps import StepRecord, step_not_found
from .cron import MemoryCron
from .leases import LeaseTable, MemoryLeases
from .maintenance import MemoryMaintenance
from .rows import (
    CounterKey,
    JobRow,
    JobTable,
    WorkerRegistry,
    add_to_bucket,
    bounded_stack,
    dump_json,
    matches,
    pickup_ms,
    queue_stats,
    result_json,
    truncate_ms,
)
from .slots import SlotTable
from .steps import EventRow, MemoryEvents, MemorySteps

__all__ = ["MemoryDriver"]

_WAITING = frozenset({JobState.READY, JobState.DELAYED, JobState.SUSPENDED})
_NACK_OUTCOMES = {JobState.DEAD: "dead", JobState.FAILED: "failed"}


class MemoryDriver(BaseDriver):
    """Jobs in dicts, with the Postgres driver's answers, for one process."""

    name = "memory"
    features = DriverFeatures()
    """None of the flags: no LISTEN, no Django transaction to join, no slot
    hand-over, no model tables, one process."""

    cron: MemoryCron

    def __init__(self, clock: Clock = system_clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.cron = MemoryCron(self)
        self._forget()
        self.steps = MemorySteps(self)
        self.events = MemoryEvents(self)
        self.leases = MemoryLeases(self)
        self.maintenance = MemoryMaintenance(self)

    def _forget(self) -> None:
        self._jobs = JobTable()
        self._steps: dict[UUID, dict[str, StepRecord]] = {}
        self._events: list[EventRow] = []
        self._event_seq = 0
        self._counters: dict[CounterKey, dict[str, int]] = {}
        self._paused: dict[str, datetime] = {}
        self._workers = WorkerRegistry()
        self._lease_table = LeaseTable()
        self._slots = SlotTable(self._lease_table)
        self.cron.forget()

    def _now(self) -> datetime:
        # Postgres answers timestamps in UTC; so does this driver.
        return self.clock.now().astimezone(UTC)

    # -- enqueue -------------------------------------------------------------

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many jobs in request order; dedupes resolved as they come.

        A refusal (``on_conflict="error"``) leaves nothing of the batch.
        """
        # Encoded before anything is written, like the Postgres bind.
        inputs = [dump_json(r.input) for r in requests]
        now = self._now()
        answers: list[Enqueued] = []
        inserted: list[JobRow] = []
        with self._lock:
            try:
                for request, text in zip(requests, inputs, strict=True):
                    answer, row = self._insert(request, text, now)
                    answers.append(answer)
                    if row is not None:
                        inserted.append(row)
            except JobDuplicate:
                for row in inserted:
                    self._jobs.delete(row)
                raise
        self._wake(row.queue for row in inserted if row.run_at <= now)
        return answers

    def _insert(
        self, request: EnqueueRequest, text: str, now: datetime
    ) -> tuple[Enqueued, JobRow | None]:
        if request.id is not None and request.id in self._jobs.rows:
            # An outbox re-publish: the row with that id, whatever its state.
            existing = self._jobs.rows[request.id]
            return Enqueued(existing.id, existing.run_id, True), None
        job_id = request.id or monotonic_uuid7()
        if request.run_at is not None:
            run_at = request.run_at.astimezone(UTC)
        else:
            run_at = now + timedelta(milliseconds=request.delay_ms)
        row = JobRow(
            id=job_id,
            name=request.name,
            queue=request.queue,
            input=text,
            idempotency_key=request.idempotency_key,
            run_id=request.run_id or job_id,
            max_attempts=request.max_attempts,
            priority=request.priority,
            state=(JobState.DELAYED if run_at > now else JobState.READY).value,
            run_at=run_at,
            created_at=now,
            updated_at=now,
            tenant_id=request.tenant_id,
            enqueued_by=request.enqueued_by,
            traceparent=request.traceparent,
            concurrency_key=request.concurrency_key,
            concurrency_limit=request.concurrency_limit,
        )
        holder = self._jobs.holder(row)
        if holder is not None:
            if request.on_conflict == "error":
                raise JobDuplicate(
                    f"a live {request.name} job already holds this idempotency key",
                    fix=f"python manage.py jobs show {holder.id}  "
                    "(or on_conflict='dedupe')",
                    meta={"holder": str(holder.id), "job": request.name},
                )
            return Enqueued(holder.id, holder.run_id, True), None
        self._jobs.add(row)
        return Enqueued(row.id, row.run_id, False, row.created_at), row

    # -- claim and settle ----------------------------------------------------

    def claim(self, options: ClaimOptions) -> ClaimResult:
        """Claim due jobs; re-take lapsed leases; bury lapsed final attempts."""
        if not options.queues:
            raise ClaimQueuesEmpty("a claim named no queue")
        if options.limit <= 0:
            return ClaimResult([], [])
        now = self._now()
        lease = now + timedelta(milliseconds=options.visibility_ms)
        with self._lock:
            queues = set(options.queues) - self._paused.keys()
            claimable = [
                row for row in self._jobs.live.values() if _claimable(row, queues, now)
            ]
            retake = options.limit if options.retake is None else options.retake
            lapsed = heapq.nsmallest(
                retake,
                (
                    row
                    for row in claimable
                    if row.state == JobState.RUNNING
                    and _wanted(row, options, lapsed=True)
                ),
                key=JobRow.claim_order,
            )
            # Full tenants' waiting rows are skipped, capped or not; lapsed
            # rows are not (as job_claim: the worker sheds those).
            waiting = (
                row
                for row in claimable
                if row.state != JobState.RUNNING
                and _wanted(row, options, lapsed=False)
                and row.tenant_id not in options.skip_tenants
            )
            # In claim order until the limit: a capped row without a free
            # slot of its key is passed over (not claimed, no attempt spent).
            picked = sorted([*waiting, *lapsed], key=JobRow.claim_order)
            claimed: list[ClaimedJob] = []
            buried: list[JobRecord] = []
            heads = slots_taken = 0
            for row in picked:
                if len(claimed) + len(buried) >= options.limit:
                    break
                retaken = row.state == JobState.RUNNING
                # A lapse charges its attempt only once that claim is known
                # to have started (see job_claim in queries.sql).
                proven = retaken and row.started_claim == row.claims
                if proven and row.attempt >= row.max_attempts:
                    buried.append(self._bury(row, options.drop_exhausted, now))
                    continue
                busy = False
                if row.concurrency_key is not None:
                    if slots_taken >= options.capped:
                        continue
                    slot = self._slots.take(
                        row.concurrency_key,
                        row.concurrency_limit or 1,
                        f"{options.worker_id}:{row.id}",
                        now,
                        lease,
                    )
                    if slot is None:
                        busy = _refusable(
                            row, options, retaken
                        ) and self._slots.busy_for(
                            row.concurrency_key, row.concurrency_limit or 1, row.id, now
                        )
                        if not busy:
                            continue
                    else:
                        slots_taken += 1
                if retaken:
                    # A lapsed lease re-taken: the dead attempt gets its entry.
                    row.add_history(
                        now,
                        row.claimed_by,
                        LEASE_LAPSED_RECLAIMED if proven else LEASE_LAPSED_UNSTARTED,
                    )
                self._jobs.move(row, JobState.RUNNING)
                if proven or not retaken:
                    row.attempt += 1  # counted at claim: a crash mid-run spends it
                row.claims += 1
                if not retaken and not busy and heads < options.start_now:
                    heads += 1
                    row.started_claim = row.claims
                row.claimed_by = options.worker_id
                row.claimed_at = row.updated_at = now
                row.visible_at = lease
                claimed.append(
                    replace(
                        row.claimed(),
                        retaken=retaken,
                        start_recorded=row.started_claim == row.claims,
                        concurrency_key=row.concurrency_key,
                        key_busy=busy,
                    )
                )
            if options.registry_ttl_ms is not None:
                # An idle worker's registry row rides along with its claim.
                self._workers.refresh(options.worker_id, now, options.registry_ttl_ms)
        return ClaimResult(claimed, buried)

    def _bury(self, row: JobRow, drop: frozenset[str], now: datetime) -> JobRecord:
        state = JobState.FAILED if row.name in drop else JobState.DEAD
        row.add_history(now, row.claimed_by, LEASE_LAPSED_FINAL_ATTEMPT)
        self._jobs.move(row, state)
        row.visible_at = row.claimed_by = row.last_error_stack = None
        row.last_error = LEASE_LAPSED_FINAL_ATTEMPT
        row.updated_at = now
        add_to_bucket(self._counters, row, now, **{state.value: 1})
        return row.record()

    def ack_many(self, requests: Sequence[AckRequest]) -> list[bool]:
        """Settle successful attempts; answers in order."""
        now = self._now()
        landed: set[UUID] = set()
        with self._lock:
            for request in requests:
                row = self._jobs.rows.get(request.job_id)
                identity = request.identity
                if row is None or not row.owned_by(identity.worker_id, identity.claim):
                    continue
                self._free_slot(row)
                row.add_history(now, row.claimed_by, None)
                self._jobs.move(row, JobState.DONE)
                row.visible_at = row.claimed_by = None
                row.result = result_json(request.result)
                row.updated_at = now
                landed.add(row.id)
                if request.counted:
                    add_to_bucket(
                        self._counters,
                        row,
                        now,
                        done=1,
                        duration_ms=request.duration_ms,
                        pickups=1,
                        pickup_ms=pickup_ms(row),
                    )
        # One UPDATE settles a row once: a repeated id answers like its first.
        return [request.job_id in landed for request in requests]

    def nack(self, request: NackRequest) -> bool:
        """Hand one attempt back (state per ``nack_state``); True if it landed."""
        state = nack_state(request)
        now = self._now()
        identity = request.identity
        with self._lock:
            row = self._jobs.rows.get(request.job_id)
            if row is None or not row.owned_by(identity.worker_id, identity.claim):
                return False
            self._free_slot(row)
            # Measured before the hand-back moves run_at.
            pickup = pickup_ms(row)
            if request.counts_as_attempt:
                row.add_history(now, row.claimed_by, request.error)
            self._jobs.move(row, state)
            if not request.counts_as_attempt:
                row.attempt = max(row.attempt - 1, 0)
            row.run_at = (
                request.run_at.astimezone(UTC)
                if request.run_at is not None
                else now + timedelta(milliseconds=request.delay_ms)
            )
            row.visible_at = row.claimed_by = None
            if request.error is not None:
                # A new error without a stack clears the old stack.
                row.last_error = request.error
                row.last_error_stack = bounded_stack(request.stack)
            row.updated_at = now
            outcome = _NACK_OUTCOMES.get(state)
            if state == JobState.READY and request.counts_as_attempt:
                outcome = "retried"
            if outcome is not None:
                add_to_bucket(
                    self._counters,
                    row,
                    now,
                    duration_ms=request.duration_ms,
                    pickups=1,
                    pickup_ms=pickup,
                    **{outcome: 1},
                )
        return True

    def heartbeat_many(
        self,
        held: Iterable[tuple[UUID, ClaimIdentity | None]],
        *,
        visibility_ms: int,
    ) -> Renewed:
        """Extend many leases (and their slots); answers the ids that landed.

        A ``None`` identity matches any holder (the operator's use).
        """
        now = self._now()
        lease = now + timedelta(milliseconds=visibility_ms)
        landed: set[UUID] = set()
        lost: set[UUID] = set()
        with self._lock:
            for job_id, identity in held:
                row = self._jobs.live.get(job_id)
                if row is None or row.state != JobState.RUNNING:
                    continue
                if identity is None or row.owned_by(identity.worker_id, identity.claim):
                    row.visible_at = lease
                    landed.add(job_id)
                    # The slot renews with the lease, only while unexpired
                    # and still this claim's (job_heartbeat_many).
                    key = row.concurrency_key
                    holder = f"{row.claimed_by}:{row.id}"
                    if key is not None and not self._slots.renew(
                        key, holder, now, lease
                    ):
                        lost.add(job_id)
        return Renewed(landed, lost)

    def _free_slot(self, row: JobRow) -> None:
        # Called by a settle that landed (the fence held): only the slot
        # this claim holds is freed, never another run's.
        if row.concurrency_key is not None:
            self._slots.release(row.concurrency_key, f"{row.claimed_by}:{row.id}")

    def mark_started(self, job_id: UUID, identity: ClaimIdentity) -> bool:
        """Record that this claim's body starts now; fenced. True if it landed."""
        with self._lock:
            row = self._jobs.live.get(job_id)
            if row is None or not row.owned_by(identity.worker_id, identity.claim):
                return False
            row.started_claim = row.claims
            return True

    def record_progress(
        self, job_id: UUID, identity: ClaimIdentity, progress: Mapping[str, Any]
    ) -> bool:
        """Store progress on a running job (fenced); True if it landed."""
        text = dump_json(progress)
        with self._lock:
            row = self._jobs.rows.get(job_id)
            if row is None or not row.owned_by(identity.worker_id, identity.claim):
                return False
            row.progress = text
        return True

    # -- reads ---------------------------------------------------------------

    def stats(self) -> list[QueueStats]:
        """Depth per queue in six exclusive buckets, sorted by queue name."""
        now = self._now()
        with self._lock:
            return queue_stats(self._jobs.rows.values(), now)

    def get(self, job_id: UUID) -> JobRecord | None:
        """Return one job row, or ``None``."""
        with self._lock:
            row = self._jobs.rows.get(job_id)
            return None if row is None else row.record()

    def counters(self, job: str) -> dict[tuple[int, datetime], dict[str, int]]:
        """That job's counter buckets, keyed (width ms, start), oldest first."""
        buckets: dict[tuple[int, datetime], dict[str, int]] = {}
        with self._lock:
            for (name, width, start, _queue), counts in sorted(
                self._counters.items(), key=lambda item: item[0][2]
            ):
                if name == job:
                    bucket = buckets.setdefault(
                        (width, start), dict.fromkeys(counts, 0)
                    )
                    for field_name, value in counts.items():
                        bucket[field_name] += value
        return buckets

    # -- operator verbs ------------------------------------------------------

    def requeue(self, job_id: UUID, *, from_step: str | None = None) -> JobRecord:
        """Make a finished job ready again (attempt 0, due now)."""
        now = self._now()
        with self._lock:
            row = self._jobs.rows.get(job_id)
            if row is None:
                raise JobNotFound("no job has that id", meta={"id": str(job_id)})
            holder = self._jobs.holder(row)
            if holder is not None:
                raise JobDuplicate(
                    "a live job holds this job's idempotency key",
                    fix=f"python manage.py jobs show {holder.id}",
                    meta={"id": str(job_id), "holder": str(holder.id)},
                )
            if row.state not in FINISHED_STATES:
                raise JobNotRequeueable(
                    f"the job is {row.state}; only finished jobs can be retried",
                    meta={"id": str(job_id), "state": row.state},
                )
            steps = self._steps.get(row.run_id, {})
            if from_step is not None and from_step not in steps:
                raise step_not_found(job_id, from_step, steps.values())
            self._jobs.move(row, JobState.READY)
            row.attempt = 0
            row.run_at = row.updated_at = now
            row.visible_at = row.claimed_by = None
            row.add_retry(now, from_step)
            if from_step is not None:
                self._drop_steps(row.run_id, from_step)
            record = row.record()
        self._wake([row.queue])
        return record

    def _drop_steps(self, run_id: UUID, from_step: str) -> None:
        # The target and every step that started after it; a step sharing
        # the target's start millisecond is kept unless it is the target.
        steps = self._steps[run_id]
        pivot = truncate_ms(steps[from_step].started_at)
        for name in [n for n, s in steps.items() if truncate_ms(s.started_at) > pivot]:
            del steps[name]
        del steps[from_step]

    def promote(self, job_id: UUID) -> JobRecord:
        """Make a ready or delayed job due now, and wake its queue."""
        now = self._now()
        with self._lock:
            row = self._jobs.rows.get(job_id)
            if row is None:
                raise JobNotFound("no job has that id", meta={"id": str(job_id)})
            if row.state not in PROMOTABLE_STATES:
                raise JobNotPromotable(
                    f"the job is {row.state}, not waiting on its run time",
                    meta={"id": str(job_id), "state": row.state},
                )
            self._jobs.move(row, JobState.READY)
            row.run_at = min(row.run_at, now)
            row.updated_at = now
            record = row.record()
        self._wake([row.queue])
        return record

    def cancel(self, job_id: UUID, *, reason: str | None = None) -> JobRecord:
        """Cancel a live job; a running one loses its fence at once."""
        now = self._now()
        with self._lock:
            row = self._jobs.live.get(job_id)
            if row is None:
                raise JobNotCancellable(
                    "the job is finished or unknown", meta={"id": str(job_id)}
                )
            self._jobs.move(row, JobState.CANCELLED)
            row.visible_at = row.claimed_by = None
            if reason is not None:
                row.last_error = reason
            row.updated_at = now
            return row.record()

    def remove(self, job_id: UUID) -> bool:
        """Delete a job that is not running, with its steps."""
        with self._lock:
            row = self._jobs.rows.get(job_id)
            if row is None:
                return False
            if row.state == JobState.RUNNING:
                raise JobNotRemovable(
                    "the job is running", meta={"id": str(job_id), "state": row.state}
                )
            self._jobs.delete(row)
            self._steps.pop(row.run_id, None)
        return True

    def list_jobs(
        self, where: JobFilter, *, before: UUID | None, limit: int
    ) -> list[JobRecord]:
        """One page of jobs, newest id first, after ``before``."""
        with self._lock:
            rows = [
                row
                for row in self._jobs.rows.values()
                if matches(row, where) and (before is None or row.id.int < before.int)
            ]
            rows.sort(key=lambda row: row.id.int, reverse=True)
            return [row.record() for row in rows[:limit]]

    def count(self, where: JobFilter) -> int:
        """How many jobs match ``where``."""
        with self._lock:
            return sum(1 for row in self._jobs.rows.values() if matches(row, where))

    def requeue_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Requeue up to ``limit`` finished rows, oldest first (see job_requeue_many)."""
        now = self._now()
        with self._lock:
            eligible: dict[object, JobRow] = {}
            for row in self._oldest_first(where):
                if row.state not in FINISHED_STATES or self._jobs.holder(row):
                    continue
                # Of finished rows sharing a key, the oldest is the candidate.
                eligible.setdefault(row.key or row.id, row)
            picked = list(eligible.values())[:limit]
            for row in picked:
                self._jobs.move(row, JobState.READY)
                row.attempt = 0
                row.run_at = row.updated_at = now
                row.visible_at = row.claimed_by = None
                row.add_retry(now, None)
        self._wake(row.queue for row in picked)
        return BulkResult(len(picked), len(eligible) - len(picked))

    def remove_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Delete up to ``limit`` rows that are not running, with their steps."""
        with self._lock:
            eligible = [
                row
                for row in self._oldest_first(where)
                if row.state != JobState.RUNNING
            ]
            for row in eligible[:limit]:
                self._jobs.delete(row)
                self._steps.pop(row.run_id, None)
        picked = min(len(eligible), limit)
        return BulkResult(picked, len(eligible) - picked)

    def promote_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Make up to ``limit`` waiting rows due now, and wake their queues."""
        now = self._now()
        with self._lock:
            eligible = [
                row
                for row in self._oldest_first(where)
                if row.state == JobState.DELAYED
                or (row.state == JobState.READY and row.run_at > now)
            ]
            picked = eligible[:limit]
            for row in picked:
                self._jobs.move(row, JobState.READY)
                row.run_at = min(row.run_at, now)
                row.updated_at = now
        self._wake(row.queue for row in picked)
        return BulkResult(len(picked), len(eligible) - len(picked))

    def _oldest_first(self, where: JobFilter) -> list[JobRow]:
        rows = [row for row in self._jobs.rows.values() if matches(row, where)]
        return sorted(rows, key=lambda row: row.id.int)

    def counter_totals(self, since: datetime) -> list[CounterTotal]:
        """Per job name, the counter buckets from ``since`` on, summed."""
        totals: dict[str, dict[str, int]] = {}
        with self._lock:
            for (job, _width, start, _queue), counts in self._counters.items():
                if start >= since:
                    total = totals.setdefault(job, dict.fromkeys(counts, 0))
                    for field_name, value in counts.items():
                        total[field_name] += value
        return [CounterTotal(job=job, **totals[job]) for job in sorted(totals)]

    def counter_buckets(self, since: datetime) -> list[CounterBucket]:
        """Every counter bucket from ``since`` on (start, job, queue order)."""
        with self._lock:
            picked = [
                CounterBucket(
                    job=job, queue=queue, width_ms=width, start=start, **counts
                )
                for (job, width, start, queue), counts in self._counters.items()
                if start >= since
            ]
        return sorted(picked, key=lambda b: (b.start, b.job, b.queue, b.width_ms))

    def pause_queue(self, queue: str) -> list[PausedName]:
        """Pause ``queue`` (the first pause's time is kept); answers the list."""
        now = self._now()
        with self._lock:
            self._paused.setdefault(queue, now)
        return self.paused_queues()

    def resume_queue(self, queue: str) -> list[PausedName]:
        """Resume ``queue`` and wake it; answers the paused list after the write."""
        with self._lock:
            resumed = self._paused.pop(queue, None) is not None
        if resumed:
            self._wake([queue])
        return self.paused_queues()

    def paused_queues(self) -> list[PausedName]:
        """Paused queues sorted by name (code-point order, like COLLATE "C")."""
        with self._lock:
            return [PausedName(name, at) for name, at in sorted(self._paused.items())]

    def announce_worker(self, worker: WorkerRecord, *, ttl_ms: int) -> None:
        """Insert or refresh a worker's registry row."""
        now = self._now()
        with self._lock:
            self._workers.announce(worker, now, ttl_ms)

    def forget_worker(self, worker_id: str) -> None:
        """Delete a worker's registry row."""
        with self._lock:
            self._workers.forget(worker_id)

    def workers(self) -> list[WorkerRecord]:
        """Live workers sorted by id; lapsed rows are deleted by the read."""
        now = self._now()
        with self._lock:
            return self._workers.live(now)

    def close(self) -> None:
        """Forget every row, step, counter, pause and worker."""
        with self._lock:
            self._forget()

    # -- test hooks: the conformance suite's put_step and step_names --------

    def put_step(
        self, run_id: UUID, name: str, started_at: datetime, status: str = "completed"
    ) -> None:
        """Record a step of ``run_id`` straight in the store (a test hook).

        The conformance suite's ``put_step`` fixture: a driver built on this
        store (the example driver) hands it this method.
        """
        with self._lock:
            self._steps.setdefault(run_id, {})[name] = StepRecord(
                run_id=run_id, name=name, status=status, started_at=started_at
            )

    def step_names(self, run_id: UUID) -> set[str]:
        """The names of the steps recorded for ``run_id`` (a test hook).

        The conformance suite's ``step_names`` fixture.
        """
        with self._lock:
            return set(self._steps.get(run_id, {}))

    # -- wake ----------------------------------------------------------------

    @staticmethod
    def _wake(queues: Iterable[str]) -> None:
        # Called after the lock is released: a listener may call straight
        # back into the driver (a worker loop claiming at once).
        for queue in dict.fromkeys(queues):
            wake_hub.notify(queue)


def _wanted(row: JobRow, options: ClaimOptions, *, lapsed: bool) -> bool:
    # Which claim takes the row: the capped one (options.capped) a row with
    # a concurrency key, the ordinary one (options.uncapped) the rest and
    # every exhausted lapse (burial needs no slot).
    if lapsed and _exhausted(row):
        return options.uncapped
    if row.concurrency_key is not None:
        return options.capped > 0
    return options.uncapped


def _exhausted(row: JobRow) -> bool:
    # A lapse proven started on its final attempt: buried, never re-run.
    return row.started_claim == row.claims and row.attempt >= row.max_attempts


def _refusable(row: JobRow, options: ClaimOptions, retaken: bool) -> bool:
    # when_busy="fail" is decided for fresh claims only: a lapsed run waits.
    return not retaken and row.name in options.refuse_busy


def _claimable(row: JobRow, queues: set[str], now: datetime) -> bool:
    """A due waiting row, or a running row whose lease lapsed (no reaper)."""
    if row.queue not in queues:
        return False
    if row.state in _WAITING:
        return row.run_at <= now
    return row.visible_at is not None and row.visible_at <= now


if TYPE_CHECKING:
    from ..base import JobDriver

    def _keeps_the_contract(driver: MemoryDriver) -> JobDriver:
        # mypy holds the class to every verb and role of the contract.
        return driver
