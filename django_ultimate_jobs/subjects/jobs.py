"""The two jobs every subject request runs on: one export, one erase.

Declared once, generic over subjects: the input is a request id alone, and
the request row says which subject and key. Both go to the subject's queue
(``HOUSEKEEPING_QUEUE`` by default, which every worker serves) and retry
more than a plain job: a long erase outlives a deploy or two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..jobs import JobHandle, job
from ..maintenance.builtin import housekeeping_queue
from ..retry import Retry
from .erase import run_erase
from .export import run_export

if TYPE_CHECKING:
    from ..context import JobContext

__all__ = ["ERASE_JOB", "EXPORT_JOB", "erase", "export", "job_for"]

EXPORT_JOB = "ultimate_jobs.subject.export"
ERASE_JOB = "ultimate_jobs.subject.erase"
RETRY = Retry(attempts=10)


@job(
    name=EXPORT_JOB,
    queue=housekeeping_queue,
    retry=RETRY,
    idempotency_key=lambda given: str(given["request"]),
)
def export(ctx: JobContext, *, request: str) -> dict[str, Any]:
    """Export one subject request's data into one archive."""
    return run_export(ctx, request)


@job(
    name=ERASE_JOB,
    queue=housekeeping_queue,
    retry=RETRY,
    idempotency_key=lambda given: str(given["request"]),
)
def erase(ctx: JobContext, *, request: str) -> dict[str, Any]:
    """Erase one subject request's data, table by table."""
    return run_erase(ctx, request)


def job_for(kind: str) -> JobHandle[Any]:
    """The job of a request ``kind`` (``export`` or ``erase``)."""
    handle: JobHandle[Any] = export if kind == "export" else erase
    return handle
