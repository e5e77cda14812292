"""Write settlements in batches, then announce the runs that ended.

Acks of one batch go out as ONE fenced statement (``ack_many``); nacks are
rarer and go one by one. A settle that does not land means this worker no
longer owns the row (cancelled, or re-claimed after its lease lapsed): it is
logged ``jobs.settle.unowned`` and nothing else happens, the ``on_settled``
hook included. A write that fails raises to the caller, with every execution
already written announced and the rest left unwritten (``landed is None``):
the worker keeps those and writes them again once the database answers
(while their claims are still valid), or gives them up to their leases
(:meth:`Settler.give_up`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..drivers.base import ClaimedJob, Handover, JobDriver, JobRecord
from ..errors import JobOnSettledFailed
from ..registry import get_job
from ..signals import job_finished
from .executor import Execution

__all__ = ["ON_SETTLED_ATTEMPTS", "SettledHook", "Settler"]

logger = logging.getLogger("django_ultimate_jobs")

ON_SETTLED_ATTEMPTS = 3


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


class Settler:
    """Settles executions for one worker; safe to call from one thread at a time."""

    def __init__(
        self,
        driver: JobDriver,
        *,
        on_done: Callable[[Execution], None] | None = None,
        handover: Callable[[Sequence[ClaimedJob]], Handover | None] | None = None,
        on_heirs: Callable[[list[ClaimedJob]], None] | None = None,
    ) -> None:
        self.driver = driver
        self.on_done = on_done
        # A capped worker's acks hand a settled row's slot to its key's next
        # ready row (ack_many_handover): `handover` says how many it takes
        # now (None: none), `on_heirs` receives the rows claimed that way.
        self.handover = handover
        self.on_heirs = on_heirs

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
        acks = [e for e in executions if e.ack is not None]
        if acks:
            requests = [e.ack for e in acks if e.ack is not None]
            handover = (
                self.handover([e.claimed for e in acks])
                if self.handover is not None
                else None
            )
            ack_handover = getattr(self.driver, "ack_many_handover", None)
            heirs: list[ClaimedJob] = []
            if handover is not None and ack_handover is not None:
                landed, heirs = ack_handover(requests, handover)
            else:
                landed = self.driver.ack_many(requests)
            for execution, ok in zip(acks, landed, strict=True):
                execution.landed = ok
            if heirs and self.on_heirs is not None:
                self.on_heirs(heirs)
        for execution in executions:
            if execution.nack is not None:
                execution.landed = self.driver.nack(execution.nack)
                if execution.landed and execution.wake_step is not None:
                    self._recheck_wait(execution)

    def _recheck_wait(self, execution: Execution) -> None:
        # An event committed between the run's last search and its park was
        # missed by the publisher's wake (the run was still running then).
        events = getattr(self.driver, "events", None)
        if events is not None and execution.wake_step is not None:
            events.wake_waiting(execution.claimed.id, execution.wake_step)

    def _announce(self, execution: Execution) -> None:
        claimed = execution.claimed
        if not execution.landed and execution.outcome != "lost":
            logger.warning(
                "jobs.settle.unowned",
                extra={
                    "job": claimed.name,
                    "job_id": str(claimed.id),
                    "worker_id": claimed.claimed_by,
                    "settling": execution.outcome,
                },
            )
        elif execution.outcome in ("retried", "dead-lettered", "dropped"):
            logger.warning(
                "jobs.attempt.failed",
                extra={
                    "job": claimed.name,
                    "job_id": str(claimed.id),
                    "attempt": claimed.attempt,
                    "outcome": execution.outcome,
                    "stop": execution.stop,
                },
            )
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
            )
        if execution.landed and execution.ends_run:
            self._on_settled(execution)
        if self.on_done is not None:
            self.on_done(execution)

    def _on_settled(self, execution: Execution) -> None:
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

    def announce_buried(self, rows: Sequence[JobRecord]) -> None:
        """Report rows a claim buried (lease lapsed on their final attempt)."""
        for row in rows:
            logger.error(
                "jobs.claim.exhausted",
                extra={
                    "job": row.name,
                    "job_id": str(row.id),
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
    """Run ``on_settled`` up to three times; never raise to the worker."""
    for _ in range(ON_SETTLED_ATTEMPTS):
        try:
            hook(settled)
            return
        except Exception as error:
            last = error
    failure = JobOnSettledFailed(
        f"on_settled of {job} raised {type(last).__name__} on all {ON_SETTLED_ATTEMPTS} tries"
    )
    logger.error(
        "jobs.on-settled.failed",
        extra={"job": job, "job_id": str(settled.job_id), "code": failure.code},
        exc_info=last,
    )
