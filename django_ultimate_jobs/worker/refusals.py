"""Settlements of attempts whose body does not run here.

Each takes the attempt's settlement (only the first taker settles it) and
answers the :class:`~.executor.Execution` the settle loop writes: a job this
release does not know is parked, a busy key's ``when_busy="fail"`` row is
refused, a drain hands an attempt back uncounted, and an attempt that can
no longer start writes nothing (its lease decides).
"""

from __future__ import annotations

import logging

from ..drivers.base import NackRequest
from ..errors import Draining, JobKeyBusy
from ..registry import unknown_job
from .executor import Attempt, Execution
from .logfields import error_fields, job_fields

__all__ = ["drained", "not_started", "park_unknown", "refuse_busy"]

logger = logging.getLogger("django_ultimate_jobs")


def park_unknown(attempt: Attempt, park_ms: int) -> Execution:
    """Park a job no handler is registered for, without spending an attempt."""
    # Deploy skew: a newer release enqueued a job this one does not know.
    # Park it without spending an attempt; a worker that knows it will run it.
    claimed = attempt.claimed
    attempt.take_settlement()
    nack = NackRequest(
        job_id=claimed.id,
        identity=claimed.identity,
        delay_ms=park_ms,
        error=unknown_job(claimed.name).render(),  # names where it looked
        counts_as_attempt=False,
        park=True,
    )
    logger.warning("jobs.worker.job-unknown", extra=job_fields(claimed))
    return Execution(claimed, "suspended", 0, None, nack=nack)


def refuse_busy(attempt: Attempt) -> Execution:
    """Fail a ``when_busy="fail"`` row whose key is busy, its attempt given back."""
    # when_busy="fail" and every live slot of the key is another job's
    # (job_claim_busy): the row settles failed, its body never runs, the
    # attempt is given back, and it is no dead letter (jobs retry
    # re-queues it).
    claimed = attempt.claimed
    attempt.take_settlement()
    error = JobKeyBusy(
        f"another run of {claimed.name} holds its concurrency key; "
        'when_busy="fail" refused this one without running it',
        meta={"job": claimed.name},
    )
    nack = NackRequest(
        job_id=claimed.id,
        identity=claimed.identity,
        error=error.render(),
        counts_as_attempt=False,
        fail=True,
    )
    logger.info(
        "jobs.attempt.refused",
        extra={**job_fields(claimed), **error_fields(error)},
    )
    return Execution(claimed, "refused", 0, attempt.handle, nack=nack, error=error)


def drained(attempt: Attempt, worker_id: str) -> Execution:
    """Hand an attempt back uncounted (``X_DRAINING``); the caller took its settlement."""
    reason = Draining(f"worker {worker_id} is shutting down")
    return Execution(
        attempt.claimed,
        "interrupted",
        attempt.elapsed_ms(),
        attempt.handle,
        nack=NackRequest(
            job_id=attempt.claimed.id,
            identity=attempt.claimed.identity,
            error=reason.render(),
            counts_as_attempt=False,
        ),
        error=reason,
    )


def not_started(attempt: Attempt) -> Execution:
    """An attempt whose body must not start: nothing is written."""
    # Nothing is written: the row stays leased to this claim until its lease
    # lapses, and that lapse is not charged (its start was never recorded).
    attempt.take_settlement()
    return Execution(attempt.claimed, "lost", 0, attempt.handle)
