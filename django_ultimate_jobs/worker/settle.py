"""The settle loop: write settlements in batches, then announce the runs that ended.

One thread (``uj-settler``) takes what the slots, the keeper and the drain
put on the settle queue, gathers what finishes within a couple of
milliseconds, and writes it: acks of one batch go out as ONE fenced
statement (``ack_many``), with what their bodies gave ``ctx.write_on_ack``
(:mod:`.ackwrites`); nacks are rarer and go one by one. A settle that
does not land means this worker no longer owns the row (cancelled, or
re-claimed after its lease lapsed): it is logged ``jobs.settle.unowned``
and nothing else happens, the ``on_settled`` hook included. A write that
fails raises to the loop, with every execution already written announced
and the rest left unwritten (``landed is None``): the loop keeps those and
writes them again once the database answers (while their claims are still
valid), retries a deadlock victim, or gives them up to their leases
(:meth:`SettleLoop.give_up`). Each settled attempt leaves the held
attempts (:meth:`~.held.HeldAttempts.settled`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections

from ..drivers.base import ClaimedJob, Handover, JobDriver, JobRecord, NackRequest
from ..drivers.djangodb import drop_dead_connections
from ..drivers.sessions import Session
from ..errors import JobOnSettledFailed
from ..faults import BEFORE_OUTCOME_WRITE, fault_point
from ..registry import get_job
from ..signals import job_finished
from ..wake import instant_of
from .ackwrites import AckWrites
from .executor import Attempt, Execution
from .held import SETTLE_BATCH, HeldAttempts
from .lifecycle import Lifecycle
from .logfields import MAX_ERROR_TEXT, error_fields, job_fields
from .refusals import drained
from .watchers import AttemptWatchers

__all__ = [
    "ON_SETTLED_ATTEMPTS",
    "SETTLE_RETRIES",
    "SettleLoop",
    "SettledHook",
    "announce_buried",
    "call_on_settled",
]

logger = logging.getLogger("django_ultimate_jobs")

ON_SETTLED_ATTEMPTS = 3
SETTLE_GATHER_S = 0.002
SETTLE_RETRIES = 5
"""Retries of a settle that lost a deadlock or a serialization conflict."""
_STOP: Any = object()


class SettledHook:
    """What ``on_settled`` receives: how one run ended."""

    __slots__ = (
        "attempt",
        "code",
        "error",
        "input",
        "job_id",
        "outcome",
        "result",
        "run_id",
    )

    def __init__(
        self,
        *,
        outcome: str,
        job_id: Any,
        run_id: Any,
        attempt: int,
        input: Any,
        result: Any = None,
        error: str | None = None,
        code: str | None = None,
    ) -> None:
        self.outcome = outcome
        self.job_id = job_id
        self.run_id = run_id
        self.attempt = attempt
        self.input = input
        self.result = result
        self.error = error
        self.code = code

    def __repr__(self) -> str:
        return f"<SettledHook {self.outcome} {self.job_id} attempt={self.attempt}>"


class SettleLoop:
    """Settles one worker's executions: the settle thread, or a caller's (tick)."""

    def __init__(
        self,
        driver: JobDriver,
        *,
        held: HeldAttempts,
        life: Lifecycle,
        settles: queue.SimpleQueue[Any],
        session: Session,
        worker_id: str,
        handover: Callable[[Sequence[ClaimedJob]], Handover | None] | None = None,
        on_heirs: Callable[[list[ClaimedJob]], None] | None = None,
        on_due: Callable[[float], None] | None = None,
        watchers: AttemptWatchers | None = None,
    ) -> None:
        self.driver = driver
        self._watchers = watchers or AttemptWatchers()
        self._held = held
        self._life = life
        self._settles = settles
        self._db = session
        self._worker_id = worker_id
        # A capped worker's acks hand a settled row's slot to its key's next
        # ready row (ack_many_handover): `handover` says how many it takes
        # now (None: none), `on_heirs` receives the rows claimed that way.
        self._handover = handover
        self._on_heirs = on_heirs
        # A retry (or a park) written with a time: the claim loop's idle
        # wait ends then (a retry of delay="1s" started 3-4 s late).
        self._on_due = on_due
        self._on_done = held.settled
        self._writes = AckWrites(driver)
        self._retries = 0
        """Retries in a row of a settle that lost a deadlock (_write_batch)."""
        self._thread: threading.Thread | None = None

    # -- the thread ----------------------------------------------------------------

    def start(self) -> None:
        """Start the settle thread (``uj-settler``)."""
        self._thread = threading.Thread(target=self.run, name="uj-settler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to write what is queued and end."""
        self._settles.put(_STOP)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def hand_back(self, attempts: Sequence[Attempt]) -> None:
        """Queue each attempt not settled yet to go back uncounted (X_DRAINING)."""
        handed = 0
        for attempt in attempts:
            if attempt.take_settlement():
                handed += 1
                self._settles.put([drained(attempt, self._worker_id)])
        if handed:
            logger.info("jobs.worker.drain-handed-back", extra={"count": handed})

    def run(self) -> None:
        """The settle thread's body: gather, write, keep, until stopped."""
        db = self._db
        db.bind()
        pending: list[Execution] = []
        stop = False
        try:
            while True:
                batch, stop = self._next_batch(pending, stop)
                retry_in = db.retry_in()
                if retry_in > 0:
                    # The database is away: keep the batch (and gather more)
                    # until this process's next try.
                    pending = batch
                    if not stop:
                        self._wait_for_settles(pending, retry_in)
                        continue
                    if self._life.may_keep_trying():
                        time.sleep(min(retry_in, 0.1))
                        continue
                pending = (
                    self._write_batch(batch) if batch and retry_in == 0 else pending
                )
                if stop and (not pending or not self._life.may_keep_trying()):
                    # After the stop, pending settles are retried until the
                    # drain deadline; then they are left to their leases.
                    self.give_up(pending)
                    return
        finally:
            connections.close_all()

    def _next_batch(
        self, pending: list[Execution], stop: bool
    ) -> tuple[list[Execution], bool]:
        # Settles kept from a failed write come first. Gather what finishes
        # within a couple of milliseconds into one statement: settles add
        # latency to nothing a user waits on, and one round trip per batch
        # is the throughput.
        batch = list(pending)
        if not batch and not stop:
            first = self._settles.get()
            if first is _STOP:
                return [], True
            batch.extend(first)
        gather_until = time.monotonic() + SETTLE_GATHER_S
        while not stop and len(batch) < SETTLE_BATCH:
            try:
                timeout = gather_until - time.monotonic()
                if timeout <= 0 or len(batch) >= self._held.count():
                    item = self._settles.get_nowait()
                else:
                    item = self._settles.get(timeout=timeout)
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            batch.extend(item)
        return batch, stop

    def _wait_for_settles(self, pending: list[Execution], seconds: float) -> None:
        # While the database is away, new settles still arrive; hold them
        # with the pending ones, and put a stop back for the next round.
        try:
            item = self._settles.get(timeout=seconds)
        except queue.Empty:
            return
        if item is _STOP:
            self._settles.put(_STOP)  # read again by the next gather
        else:
            pending.extend(item)

    def _write_batch(self, batch: list[Execution]) -> list[Execution]:
        """Write ``batch``; answer what must be written again (the database was away)."""
        fault_point(BEFORE_OUTCOME_WRITE)
        self._db.refresh()
        try:
            self.settle(batch)
        except Exception as error:
            unwritten = [e for e in batch if e.landed is None]
            if self._db.failed(error):
                # Kept and written again once the database answers: the
                # claims are still ours until their leases lapse, and a
                # settle that then no longer lands is only logged.
                return unwritten
            sessions = self.driver.sessions
            if sessions.is_transient(error) and self._retries < SETTLE_RETRIES:
                # A deadlock or serialization victim: the server rolled the
                # statement back whole, and the same write lands on a retry.
                # Given up instead, bodies that ran would wait out their
                # leases and run again (and a lapse may spend an attempt).
                self._retries += 1
                logger.warning(
                    "jobs.settle.retried",
                    extra={
                        "sqlstate": sessions.error_code(error),
                        "count": len(unwritten),
                    },
                )
                return unwritten
            self._retries = 0
            logger.exception("jobs.worker.settle-failed", extra={"count": len(batch)})
            self.give_up(unwritten)
            return []
        self._retries = 0
        self._db.ok()
        return []

    # -- one batch -------------------------------------------------------------------

    def settle(self, executions: Sequence[Execution]) -> None:
        """Write the settlements of ``executions`` not yet written; announce each.

        Raises the database error of a write that failed: what was written
        before it is announced, the rest keeps ``landed is None``.
        """
        todo = [e for e in executions if e.landed is None]
        try:
            self._write(todo)
        finally:
            for execution in todo:
                if execution.landed is not None:
                    self._announce(execution)

    def give_up(self, executions: Sequence[Execution]) -> None:
        """Announce unwritten settlements as not landed: their leases decide."""
        unwritten = [e for e in executions if e.landed is None]
        if unwritten:
            logger.error(
                "jobs.settle.abandoned",
                extra={
                    "count": len(unwritten),
                    "fix": "nothing to do: each job runs again once its lease lapses",
                },
            )
        for execution in unwritten:
            execution.landed = False
            self._announce(execution)

    def _write(self, executions: Sequence[Execution]) -> None:
        for execution in executions:
            if execution.ack is None and execution.nack is None:
                execution.landed = False  # a lost lease writes nothing
        acks = _newest_claims([e for e in executions if e.ack is not None])
        if acks:
            requests = [e.ack for e in acks if e.ack is not None]
            handover = (
                self._handover([e.claimed for e in acks])
                if self._handover is not None
                else None
            )

            def ack() -> tuple[list[bool], list[ClaimedJob]]:
                if handover is not None:
                    return self.driver.ack_many_handover(requests, handover)
                return self.driver.ack_many(requests), []

            landed, heirs = self._writes.run(acks, ack)
            for execution, ok in zip(acks, landed, strict=True):
                execution.landed = ok
            if heirs and self._on_heirs is not None:
                self._on_heirs(heirs)
        for execution in executions:
            if execution.nack is not None:
                execution.landed = self.driver.nack(execution.nack)
                if execution.landed and execution.wake_step is not None:
                    self._recheck_wait(execution)
                if execution.landed and self._on_due is not None:
                    _hint_due(self._on_due, execution.nack)

    def _recheck_wait(self, execution: Execution) -> None:
        # An event committed between the run's last search and its park was
        # missed by the publisher's wake (the run was still running then).
        if execution.wake_step is not None:
            self.driver.events.wake_waiting(execution.claimed.id, execution.wake_step)

    def _announce(self, execution: Execution) -> None:
        claimed = execution.claimed
        if not execution.landed and execution.outcome != "lost":
            logger.warning(
                "jobs.settle.unowned",
                extra={
                    **job_fields(claimed),
                    "worker_id": claimed.claimed_by,
                    "settling": execution.outcome,
                },
            )
        elif execution.outcome in ("retried", "dead-lettered", "dropped"):
            logger.warning(
                "jobs.attempt.failed",
                extra={
                    **job_fields(claimed),
                    "outcome": execution.outcome,
                    **error_fields(execution.error),
                    "stop": execution.stop,
                },
            )
        if execution.handle is not None and self._watchers.on_finished:
            self._watchers.finished(execution)
        if execution.handle is not None and job_finished.listened_for(
            type(execution.handle)
        ):
            job_finished.send_robust(
                sender=type(execution.handle),
                job=execution.handle,
                claimed=claimed,
                outcome=execution.outcome,
                landed=execution.landed,
                error=execution.error,
                duration_ms=execution.duration_ms,
            )
        if execution.landed and execution.ends_run:
            _on_settled(execution)
        self._on_done(execution)


def _newest_claims(acks: list[Execution]) -> list[Execution]:
    """``acks`` without those a newer claim of the same job in the batch
    overtook (a settle kept past its lease, the job run again since): only
    the newest claim can land, and the older one's writes are not ours."""
    newest: dict[Any, int] = {}
    for execution in acks:
        claimed = execution.claimed
        newest[claimed.id] = max(newest.get(claimed.id, -1), claimed.identity.claim)
    if len(newest) == len(acks):
        return acks
    kept = []
    for execution in acks:
        if execution.claimed.identity.claim < newest[execution.claimed.id]:
            execution.landed = False
        else:
            kept.append(execution)
    return kept


def _on_settled(execution: Execution) -> None:
    handle = execution.handle
    if handle is None or handle.on_settled is None:
        return
    claimed = execution.claimed
    error = execution.nack.error if execution.nack is not None else None
    hook = SettledHook(
        outcome=execution.outcome,
        job_id=claimed.id,
        run_id=claimed.run_id,
        attempt=claimed.attempt,
        input=claimed.input,
        result=execution.result,
        error=error,
        code=getattr(execution.error, "code", None),
    )
    call_on_settled(handle.on_settled, hook, claimed.name)


def announce_buried(rows: Sequence[JobRecord]) -> None:
    """Report rows a claim buried (lease lapsed on their final attempt)."""
    for row in rows:
        logger.error(
            "jobs.claim.exhausted",
            extra={
                "job": row.name,
                "job_id": str(row.id),
                "run_id": str(row.run_id),
                "attempt": row.attempt,
                "queue": row.queue,
                "state": row.state.value,
            },
        )
        handle = get_job(row.name)
        if handle is None or handle.on_settled is None:
            continue
        hook = SettledHook(
            outcome="dead-lettered" if row.state.value == "dead" else "dropped",
            job_id=row.id,
            run_id=row.run_id,
            attempt=row.attempt,
            input=row.input,
            error=row.last_error,
        )
        call_on_settled(handle.on_settled, hook, row.name)


def call_on_settled(
    hook: Callable[[SettledHook], Any], settled: SettledHook, job: str
) -> None:
    """Run ``on_settled`` up to three times; never raise to the worker.

    A try that lost its database connection leaves it closed, so the next
    try (and the settle thread's next statement) reconnects.
    """
    for _ in range(ON_SETTLED_ATTEMPTS):
        try:
            hook(settled)
            return
        except Exception as error:
            last = error
            drop_dead_connections()
    failure = JobOnSettledFailed(
        f"on_settled of {job} raised {type(last).__name__} on all {ON_SETTLED_ATTEMPTS} tries"
    )
    logger.error(
        "jobs.on-settled.failed",
        extra={
            "job": job,
            "job_id": str(settled.job_id),
            "run_id": str(settled.run_id),
            "attempt": settled.attempt,
            "code": failure.code,
            "error": f"{type(last).__name__}: {last}"[:MAX_ERROR_TEXT],
        },
        exc_info=last,
    )


def _hint_due(on_due: Callable[[float], None], nack: NackRequest) -> None:
    """Tell the claim loop when a row this worker handed back falls due."""
    if nack.dead_letter or nack.fail:
        return
    if nack.run_at is not None:
        on_due(instant_of(nack.run_at.timestamp()))
    elif nack.delay_ms > 0:
        on_due(time.monotonic() + nack.delay_ms / 1000)
