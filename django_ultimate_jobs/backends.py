"""The ``django.tasks`` backend: Django's ``@task`` functions run on ``runjobs``.

```python
TASKS = {
    "default": {
        "BACKEND": "django_ultimate_jobs.backends.UltimateJobsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"attempts": 5, "backoff": "exponential", "timeout": "5m"},
    }
}
```

Every task becomes one row of the job table, written on the caller's
connection (it commits or rolls back with the caller's ``atomic()``), run by
the worker through the bridge job (:mod:`django_ultimate_jobs.tasks.bridge`)
with retries, backoff, priority, ``run_after`` and crash recovery. Results
are read back from the row by any process.

On Django 6.x this is a ``django.tasks`` backend; on Django 5.2 it is one of
the ``django-tasks`` backport. Without either this module still imports,
and building the backend raises ``ImproperlyConfigured`` naming the package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.core import checks
from django.utils import timezone

from .drivers import get_driver
from .drivers.base import EnqueueRequest, JobDriver
from .durations import DurationInput
from .errors import JobInputInvalid
from .jobs import JobHandle
from .outbox.staging import submit
from .signals import job_enqueued
from .tasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    require_framework,
    task_enqueued,
)
from .tasks.errors import TaskFailed, TaskInputInvalid, TaskInvalid
from .tasks.payload import PayloadInvalid, TaskPayload
from .tasks.policy import PolicyInvalid, TaskPolicy, task_overrides
from .tasks.results import new_result, parse_result_id, result_from_record
from .validation import NAME_RULE, name_problem

__all__ = [
    "TaskFailed",
    "TaskInputInvalid",
    "TaskInvalid",
    "UltimateJobsBackend",
    "UltimateTask",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class UltimateTask(Task):
    """A ``Task`` with this backend's per-task policy (every field optional).

    Django passes ``@task(...)`` keywords it does not know to the backend's
    ``task_class`` (Django 6.1 and the backport), so they are written
    ``@task(attempts=5, backoff="linear", timeout="30s")``. ``None`` keeps
    the backend's ``OPTIONS``.

    Attributes:
        attempts: total attempts including the first.
        backoff: ``"exponential"``, ``"linear"`` or ``"fixed"``.
        delay: the base delay between attempts.
        max_delay: the cap of any one delay.
        jitter: ``"equal"``, ``"full"`` or ``"none"``.
        timeout: a deadline for one attempt (``X_JOB_TIMEOUT``, retried).
        idempotency_key: a string, or ``(*args, **kwargs) -> str``: at most
            one live run of this task per key; a second enqueue answers the
            live one's result.
    """

    attempts: int | None = None
    backoff: str | None = None
    delay: DurationInput | None = None
    max_delay: DurationInput | None = None
    jitter: str | None = None
    timeout: DurationInput | None = None
    idempotency_key: str | Callable[..., str] | None = None


class UltimateJobsBackend(BaseTaskBackend):
    """Durable ``django.tasks`` on PostgreSQL: every ``supports_*`` is True.

    Attributes:
        policy: the :class:`~django_ultimate_jobs.tasks.policy.TaskPolicy`
            built from ``OPTIONS`` (every task's defaults).

    Raises:
        ImproperlyConfigured: no ``django.tasks`` is installed (Django 5.2
            without the ``django-tasks`` backport), or ``OPTIONS`` / ``QUEUES``
            are invalid (``InvalidTaskBackend``).
    """

    task_class = UltimateTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        require_framework(f"TASKS[{alias!r}] (django_ultimate_jobs)")
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]"
        try:
            self.policy = TaskPolicy.build(self.options)
        except PolicyInvalid as error:
            raise InvalidTaskBackend(
                f"{where}['OPTIONS'] is invalid: {error}"
            ) from None
        bad = sorted(str(q) for q in self.queues if name_problem(q))
        if bad:
            raise InvalidTaskBackend(
                f"{where}['QUEUES'] holds invalid queue names: {', '.join(bad)} "
                f"(each must be {NAME_RULE})"
            )

    # -- Django's backend API ---------------------------------------------------

    def validate_task(self, task: Task) -> None:
        """Django's checks, then the queue name and the per-task policy.

        Raises:
            InvalidTask: the task cannot run on this backend.
        """
        super().validate_task(task)
        problem = name_problem(task.queue_name)
        if problem:
            raise InvalidTask(f"queue_name {problem}")
        try:
            TaskPolicy.build(task_overrides(task), base=self.policy)
        except PolicyInvalid as error:
            raise InvalidTask(f"{task.module_path}: {error}") from None
        key = getattr(task, "idempotency_key", None)
        if key is not None and not callable(key) and not (isinstance(key, str) and key):
            raise InvalidTask(
                "idempotency_key must be a non-empty string or a callable"
            )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Insert the task's job on the caller's connection; answer its result.

        A second enqueue under a live idempotency key answers the live
        task's result (nothing is inserted, ``task_enqueued`` is not sent).

        Raises:
            InvalidTask: the task cannot run on this backend.
            TaskInputInvalid: the arguments (or the key) are not JSON-safe.
        """
        from .tasks.bridge import task_handle

        self.validate_task(task)
        payload = self._payload(task, args, kwargs)
        driver = get_driver()
        # Directly, or staged in the caller's transaction (the outbox).
        (answer,) = submit([self._request(task, payload)], None)
        if job_enqueued.receivers:
            job_enqueued.send_robust(sender=JobHandle, job=task_handle, enqueued=answer)
        if answer.deduped:
            holder = self._existing(answer.id, task)
            if holder is not None:
                return holder
        # The row's own created_at (the transaction's now()): a later read of
        # the result, in any process, says the same.
        enqueued_at = answer.enqueued_at or _now(driver)
        result = new_result(task, answer.id, payload, enqueued_at)
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """Read a task's result from its row, in any process.

        Raises:
            TaskResultDoesNotExist: unknown or malformed id, a job that is
                not a task of this backend, or a task that no longer imports.
        """
        from .tasks.bridge import TASK_JOB, resolve_task

        job_id = parse_result_id(result_id)
        record = get_driver().get(job_id) if job_id is not None else None
        if record is None or record.name != TASK_JOB:
            raise TaskResultDoesNotExist(result_id)
        try:
            payload = TaskPayload.parse(record.input)
        except PayloadInvalid:
            raise TaskResultDoesNotExist(result_id) from None
        if payload.backend != self.alias:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = resolve_task(payload)
        except TaskInvalid as error:
            raise TaskResultDoesNotExist(f"{result_id}: {error.cause}") from None
        return result_from_record(task, record, payload)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Migrations applied, PostgreSQL, no transaction pooler with PREPARE, queues."""
        from .tasks.checks import backend_checks

        return backend_checks(self.alias, self.queues)

    # -- helpers ------------------------------------------------------------------

    def _payload(self, task: Task, args: Any, kwargs: Any) -> TaskPayload:
        try:
            normal_args: list[Any] = normalize_json(list(args))  # type: ignore[assignment]
            normal_kwargs: dict[str, Any] = normalize_json(dict(kwargs))  # type: ignore[assignment]
        except (TypeError, ValueError, RecursionError) as error:
            # RecursionError: Django's normalize_json recurses; the job
            # input's own check (100 levels) refuses anything shallower.
            raise TaskInputInvalid(
                f"the arguments of {task.module_path} are not JSON-safe ({error})",
                fix="pass ids, strings, numbers, booleans, lists and dicts",
                meta={"task": task.module_path},
            ) from None
        try:
            policy = TaskPolicy.build(task_overrides(task), base=self.policy)
        except PolicyInvalid as error:
            raise InvalidTask(f"{task.module_path}: {error}") from None
        run_after: datetime | None = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)
        return TaskPayload(
            module_path=task.module_path,
            args=normal_args,
            kwargs=normal_kwargs,
            backend=self.alias,
            takes_context=task.takes_context,
            policy=policy,
            run_after=run_after,
        )

    def _request(self, task: Task, payload: TaskPayload) -> EnqueueRequest:
        from .tasks.bridge import task_handle

        try:
            bound = task_handle.using(
                run_at=payload.run_after,
                queue=task.queue_name,
                priority=task.priority,
                idempotency_key=_key(task, payload),
            )
            request = bound.request(payload.to_input())
        except JobInputInvalid as error:
            raise TaskInputInvalid(
                f"{task.module_path} was refused at enqueue: {error.cause}",
                fix=error.fix,
                meta={"task": task.module_path},
            ) from None
        # The row's budget is the task's attempts (the handle's is the default).
        return replace(request, max_attempts=payload.policy.retry.attempts)

    def _existing(self, job_id: Any, task: Task) -> TaskResult | None:
        record = get_driver().get(job_id)
        if record is None:
            return None
        try:
            payload = TaskPayload.parse(record.input)
        except PayloadInvalid:
            return None
        return result_from_record(task, record, payload)


def _key(task: Task, payload: TaskPayload) -> str | None:
    """The stored idempotency key: namespaced by the task's path."""
    declared = getattr(task, "idempotency_key", None)
    if declared is None:
        return None
    value: Any = declared
    if callable(declared):
        try:
            value = declared(*payload.args, **payload.kwargs)
        except Exception as error:
            raise TaskInputInvalid(
                f"idempotency_key of {task.module_path} raised {type(error).__name__}",
                meta={"task": task.module_path},
            ) from error
    if not isinstance(value, str) or not value:
        raise TaskInputInvalid(
            f"idempotency_key of {task.module_path} must give a non-empty string",
            meta={"task": task.module_path},
        )
    return f"{task.module_path}:{value}"


def _now(driver: JobDriver) -> datetime:
    # The driver's clock, read here (driver.now() would ask the database).
    return driver.clock.now()
