"""The one internal job that runs every ``django.tasks`` task.

``UltimateJobsBackend.enqueue()`` writes a job named :data:`TASK_JOB` whose
input (:class:`~.payload.TaskPayload`) names the task by its module path.
The worker runs :func:`run_task`, which resolves that path with
``import_string`` and REFUSES (``X_TASK_INVALID``, never retried) anything
that is not a ``django.tasks`` ``Task`` whose own backend, and the alias it
was enqueued on, are django-ultimate-jobs backends: a row written by hand
cannot make a worker call an arbitrary function.

Importing this module registers the job and connects ``job_started`` /
``job_finished`` receivers (for this job only) that send Django's
``task_started`` / ``task_finished``; ``AppConfig.ready()`` imports it when
a ``django.tasks`` is importable.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from asgiref.sync import async_to_sync
from django.utils.module_loading import import_string

from ..context import CancellationToken, JobContext
from ..drivers import get_driver
from ..drivers.base import DEFAULT_QUEUE, ClaimedJob
from ..errors import JobTimeout, interrupts_the_process
from ..jobs import JobHandle
from ..registry import register
from ..retry import Retry
from ..signals import job_finished, job_started
from ..validation import holds_escaped_nul, input_shape
from .compat import (
    Task,
    TaskContext,
    TaskResult,
    task_backends,
    task_finished,
    task_started,
)
from .errors import RETURNED_PREFIX, TaskFailed, TaskInvalid
from .payload import PayloadInvalid, TaskPayload, json_form
from .policy import PolicyInvalid, TaskPolicy
from .results import result_from_record

__all__ = ["TASK_JOB", "TaskJobHandle", "resolve_task", "run_task", "task_handle"]

logger = logging.getLogger("django_ultimate_jobs")

TASK_JOB = "django_ultimate_jobs.task"
"""The job name every task is stored under (pinned: rows outlive renames)."""

_ENDS_RUN = frozenset({"completed", "dead-lettered", "dropped"})


class TaskJobHandle(JobHandle[Any]):
    """The bridge job's handle: its retry policy and timeout come from each row."""

    def retry_policy(self, given: Mapping[str, Any]) -> Retry:
        """The policy stored with this run (the default if it is malformed)."""
        try:
            return TaskPolicy.from_input(given.get("retry"), None).retry
        except PolicyInvalid:
            return self.retry

    def timeout_for(self, given: Mapping[str, Any]) -> int | None:
        """The per-attempt timeout stored with this run, in milliseconds."""
        value = given.get("timeout_ms")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_task(ctx: JobContext, **given: Any) -> Any:
    """Run the task a bridge job names; answer its JSON-safe return value.

    Raises:
        TaskInvalid: the input is malformed, the path names no task of a
            django-ultimate-jobs backend, or the return value is not JSON-safe.
        TaskFailed: the task raised (its code and meta kept).
        JobTimeout: the task passed its ``timeout``.
    """
    payload = _payload(given)
    task = resolve_task(payload)
    call_args: list[Any] = list(payload.args)
    if payload.takes_context:
        call_args.insert(
            0, TaskContext(task_result=_running_result(ctx, task, payload))
        )
    timer = _deadline(ctx.cancellation, payload.policy.timeout_ms)
    try:
        if inspect.iscoroutinefunction(task.func):
            value = _run_coroutine(
                task.func, call_args, payload.kwargs, ctx.cancellation
            )
        else:
            value = task.func(*call_args, **payload.kwargs)
    except BaseException as error:
        # SystemExit and a slot's KeyboardInterrupt are the task's own
        # failure, recorded with their class path (Django's ImmediateBackend
        # records them too); only Ctrl-C of the process propagates.
        if interrupts_the_process(error) or error is ctx.cancellation.reason:
            raise
        raise TaskFailed.wrap(error) from error
    finally:
        if timer is not None:
            timer.cancel()
    return _json_safe(payload.module_path, value)


def resolve_task(payload: TaskPayload) -> Task:
    """The module-level ``Task`` a payload names.

    Raises:
        TaskInvalid: not importable, not a ``Task``, or not on a
            django-ultimate-jobs backend.
    """
    from ..backends import UltimateJobsBackend

    path = payload.module_path
    try:
        backend = task_backends[payload.backend]
    except Exception as error:
        raise TaskInvalid(
            f"the task backend {payload.backend!r} is not configured in TASKS "
            f"({type(error).__name__})",
            meta={"backend": payload.backend},
        ) from None
    if not isinstance(backend, UltimateJobsBackend):
        raise TaskInvalid(
            f"TASKS[{payload.backend!r}] is not a django-ultimate-jobs backend",
            meta={"backend": payload.backend},
        )
    try:
        found = import_string(path)
    except Exception as error:
        raise TaskInvalid(
            f"{path} cannot be imported in this worker ({type(error).__name__})",
            meta={"task": path},
        ) from error
    if not isinstance(found, Task):
        raise TaskInvalid(
            f"{path} is not a django.tasks Task (only @task functions run)",
            meta={"task": path},
        )
    try:
        own = task_backends[found.backend]
    except Exception:
        own = None
    if not isinstance(own, UltimateJobsBackend):
        raise TaskInvalid(
            f"{path} is bound to TASKS[{found.backend!r}], which is not a "
            "django-ultimate-jobs backend",
            meta={"task": path, "backend": found.backend},
        )
    return found


def _payload(given: Mapping[str, Any]) -> TaskPayload:
    try:
        return TaskPayload.parse(given)
    except PayloadInvalid as error:
        raise TaskInvalid(f"the stored task input is malformed: {error}") from None


def _running_result(ctx: JobContext, task: Task, payload: TaskPayload) -> TaskResult:
    # The attempt's own driver (run_jobs(driver=...) may not be the installed one).
    driver = getattr(ctx, "_driver", None) or get_driver()
    record = driver.get(ctx.job_id)
    if record is None:  # removed while running: nothing to describe
        raise TaskInvalid("the job row disappeared while its task was starting")
    return result_from_record(task, record, payload)


def _deadline(
    token: CancellationToken, timeout_ms: int | None
) -> threading.Timer | None:
    if timeout_ms is None:
        return None
    reason = JobTimeout(f"the task passed its timeout of {timeout_ms} ms")
    timer = threading.Timer(timeout_ms / 1000, token.cancel, args=(reason,))
    timer.daemon = True
    timer.start()
    return timer


def _run_coroutine(
    func: Callable[..., Coroutine[Any, Any, Any]],
    args: list[Any],
    kwargs: dict[str, Any],
    token: CancellationToken,
) -> Any:
    # async_to_sync, as Django's Task.call(): thread-sensitive sync_to_async
    # calls inside the task (the ORM's a* methods) run on this slot's thread
    # and its database connection.
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        running = asyncio.ensure_future(func(*args, **kwargs))

        def stop(_reason: object) -> None:
            try:
                loop.call_soon_threadsafe(running.cancel)
            except RuntimeError:  # the loop already closed: the task is over
                pass

        token.on_cancel(stop)
        try:
            return await running
        except asyncio.CancelledError:
            if token.reason is not None:
                raise token.reason from None
            raise

    return async_to_sync(main)()


def _json_safe(path: str, value: Any) -> Any:
    """The return value as stored; refused as Django's backends refuse it.

    Their normalisation raises ``TypeError`` (a type JSON has no form for)
    or ``ValueError`` and they record it as the run's error: the result
    reads FAILED with that exception class. Here too, under
    ``X_TASK_INVALID``: not retried, since every attempt would return the
    same value, and running the body again repeats its side effects.
    """
    try:
        normal = json_form(value)
        text = json.dumps(normal, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
        if holds_escaped_nul(text):
            raise ValueError("a string holds a NUL character, which jsonb cannot store")
    except (TypeError, ValueError, RecursionError) as error:
        kind = type(error)
        raise TaskInvalid(
            f"{RETURNED_PREFIX}{kind.__module__}.{kind.__qualname__}: {error}",
            fix="return ids, strings, numbers, booleans, lists and dicts",
            meta={"task": path},
        ) from error
    return normal


# -- signals ------------------------------------------------------------------


def _send(
    signal: Any, claimed: ClaimedJob, name: str, error: BaseException | None = None
) -> None:
    """Send a task signal for a bridge job; never raise into the worker.

    With ``error`` (the run failed) the signal is sent while it is handled.
    """
    if not signal.receivers:
        return
    try:
        payload = TaskPayload.parse(claimed.input)
        task = resolve_task(payload)
    except (PayloadInvalid, TaskInvalid):
        return  # the attempt itself reports it (X_TASK_INVALID)
    try:
        record = get_driver().get(claimed.id)
        if record is None:
            return
        result = result_from_record(task, record, payload)
        sender = type(task_backends[payload.backend])
        answers = _while_handling(
            error, lambda: signal.send_robust(sender=sender, task_result=result)
        )
    except Exception as failure:
        answers = [(name, failure)]
    for receiver, answer in answers:
        if isinstance(answer, Exception):
            logger.error(
                "jobs.signal.receiver-failed",
                extra={"signal": name, "receiver": repr(receiver)},
                exc_info=answer,
            )


def _while_handling(error: BaseException | None, send: Callable[[], Any]) -> Any:
    """Call ``send`` as if inside ``except error:``, so sys.exc_info() names it.

    Django's ImmediateBackend sends ``task_finished`` from its except block,
    and Django's own receiver logs a failed task with ``sys.exc_info()``:
    without this its log line had no traceback. (A context manager cannot do
    it: a generator's handled exception is not the caller's.)
    """
    if error is None:
        return send()
    traceback, context = error.__traceback__, error.__context__
    try:
        raise error
    except BaseException:
        return send()
    finally:
        # Raising it again added this frame to its traceback (and may have
        # chained it): the recorded exception stays as the attempt left it.
        error.__traceback__, error.__context__ = traceback, context


def _on_job_started(sender: Any, claimed: ClaimedJob, **kwargs: Any) -> None:
    _send(task_started, claimed, "task_started")


def _on_job_finished(
    sender: Any,
    claimed: ClaimedJob,
    outcome: str,
    landed: bool | None,
    error: BaseException | None = None,
    **kwargs: Any,
) -> None:
    # A retry waiting is not "finished": only the end of the run is.
    if landed and outcome in _ENDS_RUN:
        _send(task_finished, claimed, "task_finished", error)


def _declare() -> TaskJobHandle:
    handle = TaskJobHandle(
        run_task,
        name=TASK_JOB,
        queue=DEFAULT_QUEUE,
        retry=Retry(),
        timeout_ms=None,
        step_timeout_ms=None,
        idempotency_key=None,
        tenant=None,
        concurrency=None,
        priority=0,
        input_schema=None,
        on_settled=None,
        shape=input_shape(run_task, TASK_JOB),
    )
    register(handle)
    job_started.connect(
        _on_job_started, sender=TaskJobHandle, dispatch_uid="ultimate_jobs.task_started"
    )
    job_finished.connect(
        _on_job_finished,
        sender=TaskJobHandle,
        dispatch_uid="ultimate_jobs.task_finished",
    )
    return handle


task_handle = _declare()
"""The registered bridge job (enqueued by the backend, run by the worker)."""
