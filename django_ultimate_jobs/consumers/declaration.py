"""``consumer(...)``: a job that reads a stream after a cursor, and its supervisor.

A consumer is a job (``ultimate_jobs.consumer.<name>``) and a cron task
of the same name that starts a run of it on its schedule unless one is
live (or the consumer is paused or halted). A run fetches batches after
the stored cursor and commits each batch's effects with the cursor's
move; it ends when the stream is caught up (or, with ``poll=``, when
``run_for`` has passed), and the next tick starts the next run.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..crontask import TaskHandle, task, unregister_task
from ..durations import DurationInput, parse_duration_ms
from ..errors import JobDuplicate, JobsError
from ..jobs import JobHandle, job
from ..registry import unregister
from ..retry import Retry
from ..validation import MAX_NAME_LENGTH, JsonRefused, json_text, name_problem
from .errors import ConsumerDeclarationInvalid, ConsumerUnknown

if TYPE_CHECKING:
    from ..context import JobContext
    from ..drivers.base import Enqueued

__all__ = [
    "CONSUMER_JOB_PREFIX",
    "DEFAULT_CRON",
    "DEFAULT_RUN_FOR",
    "Batch",
    "ConsumerSpec",
    "consumer",
    "get_consumer",
    "registered_consumers",
    "unregister_consumer",
]

CONSUMER_JOB_PREFIX = "ultimate_jobs.consumer."
MAX_CONSUMER_NAME = MAX_NAME_LENGTH - len(CONSUMER_JOB_PREFIX)
DEFAULT_CRON = "* * * * *"
DEFAULT_RUN_FOR = "50s"
DEFAULT_RETRY = Retry(attempts=5)
ORDERS = ("natural", None)
"""``order=``: ``"natural"`` (numbers, or strings, compared as such), ``None``
(opaque cursors: never compared), or a key callable."""

_lock = threading.Lock()
_consumers: dict[str, ConsumerSpec] = {}


@dataclass(frozen=True, slots=True)
class Batch:
    """What ``fetch(cursor)`` answers: the items after ``cursor``, and the
    cursor after them (JSON: a number or a string, typically)."""

    items: Sequence[Any]
    cursor: Any


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A declared consumer (what :func:`consumer` registered)."""

    name: str
    fetch: Callable[[Any], Any]
    handle: Callable[[list[Any]], object]
    start: Any
    order: str | Callable[[Any], Any] | None
    poll_s: float | None
    run_for_s: float
    job: JobHandle[Any]
    supervisor: TaskHandle
    origin: str

    @property
    def job_name(self) -> str:
        """``ultimate_jobs.consumer.<name>``: its job and its task."""
        return self.job.name

    def enqueue(self) -> Enqueued:
        """Start a run now (as the supervisor would); see :func:`run_consumer`."""
        from .control import run_consumer

        return run_consumer(self.name)


def consumer(
    *,
    name: str,
    fetch: Callable[[Any], Any],
    handle: Callable[[list[Any]], object],
    start: Any = None,
    order: str | Callable[[Any], Any] | None = "natural",
    cron: str = DEFAULT_CRON,
    tz: str = "UTC",
    poll: DurationInput | None = None,
    run_for: DurationInput = DEFAULT_RUN_FOR,
    queue: str | Callable[[], str] = "default",
    retry: Retry | None = None,
    timeout: DurationInput | None = None,
) -> ConsumerSpec:
    """Declare a stream consumer: its job and its supervisor task.

    Args:
        name: the durable name (its ``Consumer`` row, job and task).
        fetch: ``cursor -> Batch(items, cursor)`` (or an ``(items,
            cursor)`` pair): the items after ``cursor`` and the cursor
            after them. Called outside any transaction; an empty batch
            with the same cursor means caught up.
        handle: called with each non-empty batch's items inside the
            transaction that moves the cursor: its writes to the same
            database commit with the move, or not at all.
        start: the cursor before the first batch (``fetch(start)``).
        order: how a new cursor is checked against the stored one:
            ``"natural"`` (numbers, or strings, must not go down),
            a key callable (``key(new) >= key(old)``), or ``None`` for
            opaque cursors (only "a batch moved it" is checked).
        cron, tz: the supervisor's schedule (default every minute, UTC).
        poll: when caught up, wait this long and fetch again until
            ``run_for`` has passed (``None``: end the run at once).
        run_for: a run ends after this long; the next tick starts the next.
        queue, retry, timeout: as for ``@job`` (default 5 attempts).

    Raises:
        ConsumerDeclarationInvalid: a bad argument (nothing registered).
        CronInvalid, TimezoneInvalid: a bad schedule.
        JobDuplicate: another declaration holds the name.
    """
    problems = _problems(name, fetch, handle, start, order)
    poll_s = _seconds("poll", poll, problems) if poll is not None else None
    run_for_s = _seconds("run_for", run_for, problems)
    if problems:
        shown = name[:60] if isinstance(name, str) else repr(name)[:60]
        raise ConsumerDeclarationInvalid(
            f"consumer {shown!r} is invalid: " + "; ".join(problems),
            meta={"consumer": shown, "problems": problems},
        )
    assert run_for_s is not None
    frame = sys._getframe(1)
    origin = f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}"
    existing = _consumers.get(name)
    if existing is not None and existing.origin != origin:
        # Before the job and task: a refused consumer leaves nothing behind.
        raise JobDuplicate(
            f"two consumers are declared with the name {name!r} "
            f"({existing.origin} and {origin})",
            fix="give one of them another name=...",
            meta={"name": name},
        )

    def run(ctx: JobContext) -> dict[str, Any]:
        from .run import run_once

        return run_once(ctx, get_consumer(name))

    run.__qualname__ = run.__name__ = f"consumer_{name}"
    run.__doc__ = f"One run of consumer {name!r}."
    handle_ = job(
        name=CONSUMER_JOB_PREFIX + name,
        queue=queue,
        retry=retry if retry is not None else DEFAULT_RETRY,
        timeout=timeout,
        idempotency_key=lambda _input: name,
    )(run)
    try:
        supervisor = task(
            name=CONSUMER_JOB_PREFIX + name,
            cron=cron,
            tz=tz,
            enqueue=lambda occurrence: _supervise(name),
            catch_up="skip",
        )
    except JobsError:
        unregister(handle_.name)
        raise
    spec = ConsumerSpec(
        name=name,
        fetch=fetch,
        handle=handle,
        start=start,
        order=order,
        poll_s=poll_s,
        run_for_s=run_for_s,
        job=handle_,
        supervisor=supervisor,
        origin=origin,
    )
    with _lock:
        _consumers[name] = spec
    return spec


def _problems(name: Any, fetch: Any, handle: Any, start: Any, order: Any) -> list[str]:
    problems = []
    wrong = name_problem(name)
    if wrong is None and len(name) > MAX_CONSUMER_NAME:
        wrong = f"must be at most {MAX_CONSUMER_NAME} characters"
    if wrong is not None:
        problems.append(f"name {wrong}")
    for option, value in (("fetch", fetch), ("handle", handle)):
        if not callable(value):
            problems.append(f"{option} must be a callable")
    if order not in ORDERS and not callable(order):
        problems.append("order must be 'natural', None or a key callable")
    try:
        json_text(start)
    except JsonRefused as refused:
        problems.append(f"start {refused.reason}")
    return problems


def _seconds(option: str, value: Any, problems: list[str]) -> float | None:
    try:
        return parse_duration_ms(value, what=option) / 1000
    except JobsError as error:
        problems.append(error.cause)
        return None


def _supervise(name: str) -> list[tuple[JobHandle[Any], dict[str, Any]]]:
    """The supervisor's answer for one tick: a run, unless one is live or
    the consumer is paused or halted."""
    from ..drivers import get_driver
    from ..drivers.base import JobFilter
    from ..states import LIVE_STATES
    from .models import Consumer

    spec = get_consumer(name)
    state = Consumer.objects.filter(name=name).values_list("state", flat=True).first()
    if state in (Consumer.State.PAUSED, Consumer.State.HALTED):
        return []
    live = JobFilter(name=spec.job_name, states=frozenset(LIVE_STATES))
    if get_driver().count(live):
        return []
    return [(spec.job, {})]


def registered_consumers() -> list[ConsumerSpec]:
    """Every declared consumer, by name."""
    with _lock:
        return [_consumers[name] for name in sorted(_consumers)]


def get_consumer(name: str) -> ConsumerSpec:
    """The consumer declared under ``name``.

    Raises:
        ConsumerUnknown: none is.
    """
    found = _consumers.get(name) if isinstance(name, str) else None
    if found is None:
        raise ConsumerUnknown(
            f"no consumer is declared under the name {str(name)[:100]!r}",
            meta={"consumer": str(name)[:100]},
        )
    return found


def unregister_consumer(name: str) -> None:
    """Forget a consumer, its job and its task (tests declare them on the fly)."""
    with _lock:
        _consumers.pop(name, None)
    unregister(CONSUMER_JOB_PREFIX + name)
    unregister_task(CONSUMER_JOB_PREFIX + name)
