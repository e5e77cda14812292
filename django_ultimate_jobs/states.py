"""Job states and the sets the driver contract is written in."""

from __future__ import annotations

from enum import StrEnum

from .errors import JobRowStatusUnknown

__all__ = [
    "FINISHED_STATES",
    "LIVE_STATES",
    "PROMOTABLE_STATES",
    "REQUEUEABLE_STATES",
    "JobState",
    "parse_state",
]


class JobState(StrEnum):
    """Every state a job row can be in (see docs/explanation/states.md)."""

    READY = "ready"
    """Waiting for a worker; due at ``run_at`` (a retry in backoff is ready)."""
    DELAYED = "delayed"
    """Enqueued to run later (``delay=`` / ``run_at=``)."""
    RUNNING = "running"
    """Claimed by a worker that holds the lease until ``visible_at``."""
    SUSPENDED = "suspended"
    """Parked by a durable sleep or event wait; no slot, no attempt spent."""
    DONE = "done"
    """Finished successfully."""
    FAILED = "failed"
    """Finished without the dead-letter queue (``dead_letter=False``, busy key)."""
    DEAD = "dead"
    """Dead letter: exhausted or terminal; retryable by an operator."""
    CANCELLED = "cancelled"
    """Cancelled by an operator; terminal and distinct from dead."""


LIVE_STATES = frozenset(
    {JobState.READY, JobState.DELAYED, JobState.RUNNING, JobState.SUSPENDED}
)
FINISHED_STATES = frozenset(
    {JobState.DONE, JobState.FAILED, JobState.DEAD, JobState.CANCELLED}
)
REQUEUEABLE_STATES = FINISHED_STATES
PROMOTABLE_STATES = frozenset({JobState.READY, JobState.DELAYED})

_BY_VALUE = {state.value: state for state in JobState}


def parse_state(value: str) -> JobState:
    """Return the :class:`JobState` for a stored string; never cast.

    Raises:
        JobRowStatusUnknown: the string is not a state this build knows.
    """
    try:
        return _BY_VALUE[value]
    except KeyError:
        raise JobRowStatusUnknown(
            f"a job row is in state {value!r}, which this version does not know",
            meta={"state": value},
        ) from None
