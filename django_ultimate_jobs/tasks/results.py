"""``TaskResult`` objects from job rows: status, attempts, errors, return value.

Each counted attempt left one entry in the row's ``history`` (attempt,
worker, time and, for a failure, the stored error text), so ``errors`` has
one ``TaskError`` per failed attempt and ``worker_ids`` one id per attempt.
An attempt whose worker died gets its entry from the claim that re-takes
its lapsed lease (``X_JOB_LEASE_LOST``, with the dead worker's id); a gap in
the attempt numbers (rows written before that entry existed) is reported as
a ``JobLeaseLost`` error from an ``"unknown"`` worker, so ``attempts`` still
counts it. Only the latest failure keeps its full traceback; earlier ones
carry their stored error text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from ..drivers.base import HISTORY_RETRIED, JobRecord
from ..errors import JobLeaseLost, JobsError
from ..states import JobState
from .compat import Task, TaskError, TaskResult, TaskResultStatus
from .errors import RAISED_PREFIX, RETURNED_PREFIX
from .payload import TaskPayload

__all__ = [
    "UNKNOWN_WORKER",
    "error_class_path",
    "new_result",
    "parse_result_id",
    "result_from_record",
    "status_of",
]

UNKNOWN_WORKER = "unknown"

_STATUS = {
    JobState.READY: TaskResultStatus.READY,
    JobState.DELAYED: TaskResultStatus.READY,
    JobState.SUSPENDED: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.DONE: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}
_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})
_RAISED = re.compile(
    rf"^X_[A-Z0-9_]+: (?:{re.escape(RAISED_PREFIX)}|{re.escape(RETURNED_PREFIX)})"
    r"(?P<path>[^\s:]+)"
)
_CODE = re.compile(r"^(?P<code>X_[A-Z0-9_]+):")


def status_of(state: JobState) -> TaskResultStatus:
    """The ``TaskResultStatus`` of a job state (a waiting retry reads ``READY``)."""
    return _STATUS[state]


def parse_result_id(value: Any) -> UUID | None:
    """The job id behind a result id, or ``None`` when it is malformed."""
    if isinstance(value, UUID):
        return value
    if not isinstance(value, str):
        return None
    try:
        return UUID(value)
    except ValueError:
        return None


def new_result(
    task: Task, job_id: UUID, payload: TaskPayload, enqueued_at: datetime
) -> TaskResult:
    """The result ``enqueue()`` answers for a row it just inserted."""
    return TaskResult(
        task=task,
        id=str(job_id),
        status=TaskResultStatus.READY,
        enqueued_at=enqueued_at,
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=payload.args,
        kwargs=payload.kwargs,
        backend=payload.backend,
        errors=[],
        worker_ids=[],
    )


def result_from_record(
    task: Task, record: JobRecord, payload: TaskPayload
) -> TaskResult:
    """The result a job row describes; ``task`` is re-bound as it was enqueued."""
    status = status_of(record.state)
    errors, workers = _attempts(record)
    result: TaskResult = TaskResult(
        task=_as_enqueued(task, record, payload),
        id=str(record.id),
        status=status,
        enqueued_at=record.created_at,
        started_at=record.claimed_at,
        finished_at=record.updated_at if status in _FINISHED else None,
        last_attempted_at=record.claimed_at,
        args=payload.args,
        kwargs=payload.kwargs,
        backend=payload.backend,
        errors=errors,
        worker_ids=workers,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.result)
    return result


def _as_enqueued(task: Task, record: JobRecord, payload: TaskPayload) -> Task:
    """``task`` with the priority, queue, backend and run_after of the row."""
    changes: dict[str, Any] = {}
    if task.priority != record.priority:
        changes["priority"] = record.priority
    if task.queue_name != record.queue:
        changes["queue_name"] = record.queue
    if task.backend != payload.backend:
        changes["backend"] = payload.backend
    if payload.run_after is not None and task.run_after != payload.run_after:
        changes["run_after"] = payload.run_after
    if not changes:
        return task
    try:
        return task.using(**changes)
    except Exception:  # e.g. the queue is no longer valid there: as declared
        return task


def error_class_path(text: str) -> str:
    """The exception class path behind a stored error text.

    A task's own exception is stored as ``CODE: the task raised <path>: ...``
    (a return value JSON cannot hold as ``CODE: the task's return value is
    not JSON-safe: <path>: ...``);
    the worker's errors (timeouts, lapsed leases, refusals) as ``CODE: ...``,
    mapped back to the ``JobsError`` subclass that owns the code.
    """
    raised = _RAISED.match(text)
    if raised:
        return raised.group("path")
    coded = _CODE.match(text)
    owner = _class_for_code(coded.group("code")) if coded else None
    kind = owner or (JobsError if coded else Exception)
    return f"{kind.__module__}.{kind.__qualname__}"


def _attempts(record: JobRecord) -> tuple[list[TaskError], list[str]]:
    errors: list[TaskError] = []
    workers: list[str] = []
    entries = [entry for entry in record.history or () if isinstance(entry, dict)]
    last_failure = max(
        (i for i, entry in enumerate(entries) if entry.get("error")), default=None
    )
    previous = 0
    for index, entry in enumerate(entries):
        if entry.get("event") == HISTORY_RETRIED:
            previous = 0  # an operator requeue: its attempts start at 1 again
            continue
        number = entry.get("attempt")
        if isinstance(number, int) and not isinstance(number, bool):
            if number <= previous:
                previous = 0  # a requeue recorded before retries were entries
            _lost(range(previous + 1, number), errors, workers)
            previous = number
        workers.append(str(entry.get("worker") or UNKNOWN_WORKER))
        text = entry.get("error")
        if text:
            text = str(text)
            stack = record.last_error_stack if index == last_failure else None
            if text != record.last_error:
                stack = None  # a later uncounted hand-back replaced the stack
            errors.append(
                TaskError(
                    exception_class_path=error_class_path(text), traceback=stack or text
                )
            )
    running = record.state is JobState.RUNNING
    upto = record.attempt - 1 if running else record.attempt
    _lost(range(previous + 1, upto + 1), errors, workers)
    if running:
        workers.append(record.claimed_by or UNKNOWN_WORKER)
    return errors, workers


def _lost(numbers: Sequence[int], errors: list[TaskError], workers: list[str]) -> None:
    for number in numbers:
        workers.append(UNKNOWN_WORKER)
        errors.append(
            TaskError(
                exception_class_path=f"{JobLeaseLost.__module__}.{JobLeaseLost.__qualname__}",
                traceback=f"{JobLeaseLost.code}: attempt {number} never settled: its "
                "lease lapsed (the worker died or stalled) and another claim took over",
            )
        )


def _class_for_code(code: str) -> type[JobsError] | None:
    for kind in _subclasses(JobsError):
        if kind.__dict__.get("code") == code:
            return kind
    return None


def _subclasses(kind: type[JobsError]) -> Iterator[type[JobsError]]:
    yield kind
    for sub in kind.__subclasses__():
        yield from _subclasses(sub)
