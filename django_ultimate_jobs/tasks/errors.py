"""Error codes of the ``django.tasks`` bridge (see docs/reference/errors.md)."""

from __future__ import annotations

from typing import Any

from ..errors import JobInputInvalid, JobsError, RetryClass, code_of

__all__ = ["TaskFailed", "TaskInputInvalid", "TaskInvalid"]

RAISED_PREFIX = "the task raised "
RETURNED_PREFIX = "the task's return value is not JSON-safe: "
"""Both are followed by an exception's class path: the one a ``TaskResult``
error reports (``exception_class_path``), as Django's backends record it."""


class TaskInvalid(JobsError):
    """A bridge job cannot run: no ``Task`` of this backend at its path, or bad input.

    Raised by the worker, never retried: the stored path does not name a
    ``django.tasks`` ``Task`` whose backend is a django-ultimate-jobs backend,
    the stored input is malformed, or the task returned a value JSON cannot
    hold (stored with the ``TypeError`` or ``ValueError`` normalising it
    raised, the exception class Django's backends record for it).
    """

    code = "X_TASK_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "enqueue tasks with Task.enqueue() only, and deploy the code that defines "
        "the task before enqueueing it (then: python manage.py jobs retry <id>)"
    )


class TaskFailed(JobsError):
    """A task raised: the stored text names the exception's class path.

    The wrapper keeps the original exception's ``code`` and ``meta``, so
    ``Terminal``, ``RetryAfter``, ``RateLimited`` and registered app codes
    are classified as if raised directly; an uncoded exception gets
    ``X_TASK_FAILED`` (unclassified: retried while attempts remain).
    """

    code = "X_TASK_FAILED"
    retry_class = RetryClass.UNCLASSIFIED

    @classmethod
    def wrap(cls, error: BaseException) -> TaskFailed:
        """The wrapper for ``error`` (raise it ``from error``)."""
        kind = type(error)
        path = f"{kind.__module__}.{kind.__qualname__}"
        message = error.cause if isinstance(error, JobsError) else str(error)
        cause = f"{RAISED_PREFIX}{path}: {message}" if message else RAISED_PREFIX + path
        meta: Any = getattr(error, "meta", None)
        return cls(
            cause,
            code=code_of(error),
            meta=meta if isinstance(meta, dict) else None,
        )


class TaskInputInvalid(JobInputInvalid, TypeError, ValueError):
    """``Task.enqueue()`` refused the arguments or the idempotency key.

    Nothing was written; the code is ``X_JOB_INPUT_INVALID``. Both a
    ``TypeError`` and a ``ValueError``, the two classes Django's own
    normalisation raises (``TypeError`` for a type JSON has no form for,
    ``ValueError`` for undecodable bytes), so ``except`` clauses written for
    Django's backends keep catching it.
    """
