"""``task(...)``: declare a cron task; the scheduler fires its occurrences.

A task has no body of its own and does no I/O: for each occurrence its
``enqueue`` callback returns the jobs to queue, ``[(job_handle, input),
...]``, and the scheduler inserts them in the same statement that moves the
task's watermark (see ``worker/scheduler.py``). Declare tasks in an app's
``jobs.py`` (autodiscovered) or any module imported by ``AppConfig.ready()``.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from .cron import Schedule, check_timezone, parse_schedule
from .drivers.base import Enqueued, EnqueueRequest
from .errors import (
    CronInvalid,
    JobInputInvalid,
    JobsError,
    TaskDeclarationInvalid,
    TimezoneInvalid,
)
from .jobs import JobHandle, _check_name
from .registry import put_unique
from .validation import MAX_KEY_BYTES

__all__ = [
    "CATCH_UP_POLICIES",
    "TaskHandle",
    "get_task",
    "registered_tasks",
    "task",
    "unregister_task",
]

CatchUp = Literal["skip", "run-once", "run-all"]
CATCH_UP_POLICIES: tuple[str, ...] = ("skip", "run-once", "run-all")
MAX_CATCH_UP_LIMIT = 1_000
Entries = Sequence[tuple[JobHandle[Any], Mapping[str, Any]]]

_lock = threading.Lock()
_tasks: dict[str, TaskHandle] = {}


class TaskHandle:
    """A declared cron task. Built by :func:`task`."""

    def __init__(
        self,
        *,
        name: str,
        schedule: Schedule,
        enqueue: Callable[[datetime], Entries],
        catch_up: CatchUp,
        max_catch_up: int,
        origin: str,
    ) -> None:
        self.name = name
        self.schedule = schedule
        self.enqueue = enqueue
        self.catch_up = catch_up
        self.max_catch_up = max_catch_up
        self.origin = origin

    def __repr__(self) -> str:
        return f"<TaskHandle {self.name} {self.cron!r} {self.tz}>"

    @property
    def cron(self) -> str:
        """The cron expression as declared."""
        return self.schedule.cron

    @property
    def tz(self) -> str:
        """The IANA zone the expression is read in."""
        return self.schedule.tz

    def next_run(self, after: datetime | None = None) -> datetime:
        """The first occurrence strictly after ``after`` (default: now), in UTC."""
        return self.schedule.next_after(after or datetime.now(UTC))

    def entries(
        self, occurrence: datetime
    ) -> list[tuple[JobHandle[Any], dict[str, Any]]]:
        """Call ``enqueue`` for ``occurrence`` and check what it answered.

        ``occurrence`` is handed over in the task's zone, so
        ``occurrence.date()`` is the local date.

        Raises:
            JobInputInvalid: the callback did not answer a list of
                ``(job_handle, input_dict)`` pairs.
        """
        answer = self.enqueue(occurrence.astimezone(self.schedule.zone))
        if not isinstance(answer, list | tuple):
            raise self._bad_entries()
        checked: list[tuple[JobHandle[Any], dict[str, Any]]] = []
        for entry in answer:
            if (
                not isinstance(entry, list | tuple)
                or len(entry) != 2
                or not isinstance(entry[0], JobHandle)
                or not isinstance(entry[1], Mapping)
            ):
                raise self._bad_entries()
            checked.append((entry[0], dict(entry[1])))
        return checked

    def requests(self, occurrence: datetime) -> list[EnqueueRequest]:
        """The validated enqueue requests of ``occurrence`` (nothing written).

        Each job is due at the occurrence, recorded as enqueued by
        :attr:`actor` (``task:<name>``), and keyed ``<task>:<occurrence ISO>:<job key>``,
        where the job key is the one the job derives from its input, else
        the entry's position.
        """
        stamp = occurrence.astimezone(UTC).isoformat()
        requests = []
        for index, (handle, given) in enumerate(self.entries(occurrence)):
            own = handle.idempotency_key_for(given)
            key = _occurrence_key(self.name, stamp, own if own is not None else index)
            requests.append(
                handle.using(
                    run_at=occurrence, idempotency_key=key, actor=self.actor
                ).request(given)
            )
        return requests

    @property
    def actor(self) -> str:
        """``task:<name>``, recorded as the jobs' ``enqueued_by``.

        Cut to the 512-byte limit (ending in ``…``) for a name of many
        multi-byte characters: an actor past it refused every fire.
        """
        actor = f"task:{self.name}"
        encoded = actor.encode("utf-8", "surrogatepass")
        if len(encoded) <= MAX_KEY_BYTES:
            return actor
        ellipsis = "…"
        room = MAX_KEY_BYTES - len(ellipsis.encode("utf-8"))
        return encoded[:room].decode("utf-8", "ignore") + ellipsis

    def run_now(self) -> list[Enqueued]:
        """Enqueue this task's jobs now, outside its schedule.

        The occurrence handed to ``enqueue`` is now; the watermark is not
        touched, and each job keeps its own idempotency key (if any), so a
        manual run never dedupes against a scheduled occurrence.

        Raises:
            JobInputInvalid: the callback's answer or an input was refused.
        """
        now = datetime.now(UTC)
        return [
            handle.using(actor=self.actor).enqueue(**given)
            for handle, given in self.entries(now)
        ]

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description (for ``jobs tasks`` and manifests)."""
        return {
            "name": self.name,
            "cron": self.cron,
            "tz": self.tz,
            "catch_up": self.catch_up,
            "max_catch_up": self.max_catch_up,
        }

    def _bad_entries(self) -> JobsError:
        return JobInputInvalid(
            f"enqueue= of task {self.name} must return a list of "
            "(job_handle, input_dict) pairs",
            fix="enqueue=lambda occurrence: [(send_digest, {'day': ...})]",
            meta={"task": self.name},
        )


def task(
    *,
    name: str,
    cron: str,
    tz: str,
    enqueue: Callable[[datetime], Entries] | None = None,
    job: JobHandle[Any] | None = None,
    input: Mapping[str, Any] | Callable[[datetime], Mapping[str, Any]] | None = None,
    catch_up: CatchUp = "skip",
    max_catch_up: int = 10,
) -> TaskHandle:
    """Declare a cron task and register it with the scheduler.

    Long form: ``enqueue=lambda occurrence: [(job_handle, input), ...]``.
    Short form, one job per occurrence: ``job=handle`` with ``input=`` a
    dict, or a callable ``occurrence -> dict`` (default: no input). Build
    inputs from the occurrence, never from "now": a catch-up fires long
    after the occurrence it stands for.

    Args:
        name: the durable name; it keys the stored watermark.
        cron: five fields (``"0 9 * * *"``) or a macro (``"@daily"``).
        tz: an IANA zone (``"Europe/Paris"``, ``"UTC"``); fixed offsets
            are refused.
        enqueue: ``occurrence -> [(job_handle, input), ...]``.
        job: the job to enqueue (short form; excludes ``enqueue``).
        input: the short form's input, or ``occurrence -> input``.
        catch_up: what to fire for occurrences missed while no scheduler
            ran (or the task was paused): ``"skip"`` the latest only,
            ``"run-once"`` the earliest only, ``"run-all"`` each of them, at
            most ``max_catch_up`` (the latest ones).
        max_catch_up: the cap on one catch-up (1 to 1,000).

    Raises:
        CronInvalid, TimezoneInvalid, TaskDeclarationInvalid: at import,
            listing every problem at once (the first problem's code).
        JobDuplicate: another declaration holds the name.
    """
    problems: list[JobsError] = []

    def check(step: Callable[[], Any]) -> Any:
        try:
            return step()
        except JobsError as error:
            problems.append(error)
            return None

    def refuse(message: str) -> JobsError:
        return TaskDeclarationInvalid(message)

    check(lambda: _check_name("name", name, refuse))
    _schedule_parts(cron, tz, problems)
    schedule = None if problems else check(lambda: parse_schedule(cron, tz))
    if catch_up not in CATCH_UP_POLICIES:
        problems.append(
            refuse(f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}")
        )
    if (
        isinstance(max_catch_up, bool)
        or not isinstance(max_catch_up, int)
        or not 1 <= max_catch_up <= MAX_CATCH_UP_LIMIT
    ):
        problems.append(
            refuse(
                f"max_catch_up must be a whole number from 1 to {MAX_CATCH_UP_LIMIT}"
            )
        )
    callback = check(lambda: _callback(enqueue, job, input))
    if problems or schedule is None:
        first = problems[0]
        causes = list(dict.fromkeys(p.cause for p in problems))
        raise type(first)(
            f"task {name!r} is invalid: " + "; ".join(causes),
            fix=first.fix,
            meta={"task": str(name), "problems": causes},
        )
    frame = sys._getframe(1)
    handle = TaskHandle(
        name=name,
        schedule=schedule,
        enqueue=callback,
        catch_up=catch_up,
        max_catch_up=max_catch_up,
        origin=f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}",
    )
    _register(handle)
    return handle


def _schedule_parts(cron: Any, tz: Any, problems: list[JobsError]) -> None:
    """Check the zone and the expression apart, so both problems are listed."""
    for step in (lambda: parse_schedule(cron, "UTC"), lambda: check_timezone(tz)):
        try:
            step()
        except (CronInvalid, TimezoneInvalid) as error:
            problems.append(error)


def _callback(
    enqueue: Callable[[datetime], Entries] | None,
    job: JobHandle[Any] | None,
    given: Mapping[str, Any] | Callable[[datetime], Mapping[str, Any]] | None,
) -> Callable[[datetime], Entries]:
    if enqueue is not None:
        if job is not None or given is not None:
            raise TaskDeclarationInvalid(
                "pass enqueue= or job= (with input=), not both"
            )
        if not callable(enqueue):
            raise TaskDeclarationInvalid("enqueue must be a callable")
        return enqueue
    if not isinstance(job, JobHandle):
        raise TaskDeclarationInvalid(
            "a task needs enqueue=lambda occurrence: [...] or job=<a @job handle>"
        )
    handle = job
    if given is None or isinstance(given, Mapping):
        fixed = dict(given or {})
        try:
            handle.check_input(fixed)  # refuse a bad input at import, not at 3 a.m.
        except JobsError as error:
            raise TaskDeclarationInvalid(f"input= is refused: {error.cause}") from None
        return lambda occurrence: [(handle, fixed)]
    if not callable(given):
        raise TaskDeclarationInvalid("input must be a dict or occurrence -> dict")
    build = given
    return lambda occurrence: [(handle, build(occurrence))]


def _register(handle: TaskHandle) -> None:
    with _lock:
        put_unique(_tasks, handle, "tasks")


def get_task(name: str) -> TaskHandle | None:
    """Return the task declared under ``name``, if any."""
    return _tasks.get(name)


def registered_tasks() -> list[TaskHandle]:
    """Every declared task, sorted by name in code-unit order."""
    with _lock:
        return [_tasks[name] for name in sorted(_tasks)]


def unregister_task(name: str) -> None:
    """Forget a task (tests that declare tasks on the fly)."""
    with _lock:
        _tasks.pop(name, None)


def _occurrence_key(task: str, stamp: str, job_key: str | int) -> str:
    """``<task>:<occurrence ISO>:<job key>``, within the key byte limit.

    A task name and a job key may each be near the limit on their own; their
    join would then be refused at fire time, every occurrence. The job key
    part is replaced by its SHA-256 when the whole would not fit: still one
    key per (occurrence, job key), and stable across leaders.
    """
    key = f"{task}:{stamp}:{job_key}"
    if len(key.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES:
        return key
    digest = hashlib.sha256(str(job_key).encode("utf-8", "surrogatepass")).hexdigest()
    shorter = f"{task}:{stamp}:sha256:{digest}"
    if len(shorter.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES:
        return shorter
    # A name of 200 four-byte characters is 800 bytes by itself.
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
