"""Error codes of stream consumers (see docs/reference/errors.md).

A callable's own exception is kept as the ``__cause__`` (its stack is on
the job row); the coded error names its class, never its message, which
may carry a URL, a token or a payload.
"""

from __future__ import annotations

from ..errors import JobsError, RetryClass

__all__ = [
    "ConsumerBatchInvalid",
    "ConsumerCursorBackwards",
    "ConsumerCursorInvalid",
    "ConsumerDeclarationInvalid",
    "ConsumerFetchFailed",
    "ConsumerHandleFailed",
    "ConsumerStateInvalid",
    "ConsumerUnknown",
]


class ConsumerDeclarationInvalid(JobsError):
    """A ``consumer(...)`` declaration is refused (raised where it is made)."""

    code = "X_CONSUMER_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "correct the consumer(...) arguments the message names"


class ConsumerUnknown(JobsError):
    """No consumer is declared under that name."""

    code = "X_CONSUMER_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs_consumer  (lists the declared consumers)"


class ConsumerFetchFailed(JobsError):
    """``fetch(cursor)`` raised: nothing was handled, the cursor did not move."""

    code = "X_CONSUMER_FETCH_FAILED"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "see the job's stack for fetch()'s own error; the run retries by "
        "itself, and the supervisor starts a new one after the last attempt"
    )


class ConsumerHandleFailed(JobsError):
    """``handle(items)`` raised: its writes rolled back, the cursor did not move."""

    code = "X_CONSUMER_HANDLE_FAILED"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "see the job's stack for handle()'s own error; the batch is handled "
        "again from the same cursor on the next attempt"
    )


class ConsumerBatchInvalid(JobsError):
    """``fetch`` answered something that is not a batch, or a cursor that
    cannot be stored or ordered; the consumer is halted."""

    code = "X_CONSUMER_BATCH_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "make fetch() answer Batch(items=[...], cursor=<JSON: a number or a "
        "string>), then: python manage.py jobs_consumer <name> --resume"
    )


class ConsumerCursorBackwards(JobsError):
    """``fetch`` answered a cursor behind the stored one, or one that did not
    move past a batch of items; the consumer is halted, nothing handled."""

    code = "X_CONSUMER_CURSOR_BACKWARDS"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "fix fetch() (or the stream), then resume: python manage.py "
        "jobs_consumer <name> --resume; to re-read on purpose, set the cursor "
        "while halted: jobs_consumer <name> --set-cursor <JSON>"
    )


class ConsumerStateInvalid(JobsError):
    """An operator verb asked of a consumer in a state without that move."""

    code = "X_CONSUMER_STATE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pause an idle or running consumer; resume a paused or halted one; "
        "set the cursor of a paused or halted one"
    )


class ConsumerCursorInvalid(JobsError):
    """A cursor an operator gave cannot be stored (not JSON, a NUL...)."""

    code = "X_CONSUMER_CURSOR_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pass the cursor as JSON: --set-cursor 42 or --set-cursor '\"evt_1\"'"
