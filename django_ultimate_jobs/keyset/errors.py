"""The coded errors of a pass's moves, shared by reindex, export and import.

Backfills keep their own (``X_BACKFILL_*``), older than these. Each message
names the pass (``export 'orders' at 'exports/2026-05'``).
"""

from __future__ import annotations

from ..errors import JobsError, RetryClass
from .ledger import Refusals

__all__ = [
    "PASS_REFUSALS",
    "PassApplied",
    "PassPaused",
    "PassSourceInvalid",
    "PassStateInvalid",
]


class PassApplied(JobsError):
    """The export or import is done already; running it again needs ``force``."""

    code = "X_PASS_APPLIED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pass --force (force=True) to run it again from its first row"


class PassPaused(JobsError):
    """The pass is paused by an operator; it runs again once resumed."""

    code = "X_PASS_PAUSED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "resume it on its admin page (or pass --force to start over)"


class PassStateInvalid(JobsError):
    """Pause or resume asked of a pass in a state that has no such move."""

    code = "X_PASS_STATE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pause a pending, running or failed pass; resume a paused one"


class PassSourceInvalid(JobsError):
    """A pass cannot walk its source in keyset pages."""

    code = "X_PASS_SOURCE_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "make source= answer a QuerySet of the declared model (no slice, "
        ".values() or union), whose primary key is a number, a string or a UUID"
    )


PASS_REFUSALS = Refusals(
    applied=lambda cause, **more: PassApplied(cause, **more),
    paused=lambda cause, **more: PassPaused(cause, **more),
    state_invalid=lambda cause, **more: PassStateInvalid(cause, **more),
)
"""The refusals of the reindex, export and import ledgers."""
