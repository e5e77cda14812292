"""The details a worker's log line about one job carries.

Every line about a job names it the same way (docs/reference/logging.md):
``job`` (its name), ``job_id``, ``run_id``, ``attempt``, ``queue`` and, when
the job has one, ``traceparent`` (the JSON formatter turns it into
``trace_id``); a line about a failure adds the error's ``code`` and the
first line of its message (``error``).
"""

from __future__ import annotations

from typing import Any

from ..drivers.base import ClaimedJob
from ..errors import code_of

__all__ = ["MAX_ERROR_TEXT", "error_fields", "job_fields"]

MAX_ERROR_TEXT = 500
"""The most characters of an error's message a log line carries."""


def job_fields(claimed: ClaimedJob) -> dict[str, Any]:
    """The job's identity for a log record's ``extra``."""
    fields: dict[str, Any] = {
        "job": claimed.name,
        "job_id": str(claimed.id),
        "run_id": str(claimed.run_id),
        "attempt": claimed.attempt,
        "queue": claimed.queue,
    }
    if claimed.traceparent:
        fields["traceparent"] = claimed.traceparent
    return fields


def error_fields(error: BaseException | None) -> dict[str, Any]:
    """``code`` and ``error`` (type and first line) of a failure, for ``extra``."""
    if error is None:
        return {}
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return {"code": code_of(error), "error": text[:MAX_ERROR_TEXT]}
