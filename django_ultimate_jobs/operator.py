"""Operator verbs: the one module ``manage.py jobs`` and the admin call.

Every verb validates its arguments before any statement, answers plain
JSON-safe dicts (what ``--json`` prints), and raises a coded error when the
action did not happen, so a caller can never mistake a refusal for success.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack
from uuid import UUID

from .drivers import get_driver
from .drivers.base import (
    MAX_BULK_ROWS,
    MAX_JOB_PAGE,
    BulkResult,
    JobFilter,
    JobRecord,
    PausedName,
    QueueStats,
    WorkerRecord,
)
from .drivers.cron import SCHEDULER_LEASE_KEY
from .drivers.steps import StepRecord
from .errors import (
    JobIdInvalid,
    JobInputInvalid,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
    JobPageInvalid,
    LockInvalid,
    LockNotFound,
)
from .event_listing import events
from .jobs import _check_name
from .redaction import redact
from .registry import get_job
from .retry import backoff_delay_ms
from .states import FINISHED_STATES, PROMOTABLE_STATES, JobState
from .validation import NAME_RULE, text_problem

logger = logging.getLogger("django_ultimate_jobs")

__all__ = [
    "DEFAULT_JOB_PAGE",
    "BulkScope",
    "ListFilters",
    "cancel",
    "checked_queue",
    "checked_task",
    "count",
    "counters",
    "events",
    "job_state",
    "leases",
    "list_jobs",
    "parse_job_id",
    "pause_queue",
    "pause_task",
    "promote",
    "promote_many",
    "release_lock",
    "remove",
    "remove_many",
    "requeue_many",
    "resume_queue",
    "resume_task",
    "retry",
    "run_task",
    "show",
    "stats",
    "tasks",
    "workers",
]

DEFAULT_JOB_PAGE = 100


class ListFilters(TypedDict, total=False):
    """The filters of :func:`list_jobs` (``None``: any)."""

    queue: str | None
    name: str | None
    state: str | Iterable[str] | None
    tenant: str | None
    id_prefix: str | None
    created_from: datetime | None
    created_to: datetime | None
    error_code: str | None


class BulkScope(TypedDict, total=False):
    """Which rows a bulk verb reads besides their state (``None``: any)."""

    queue: str | None
    name: str | None
    tenant: str | None
    error_code: str | None


_HEX = frozenset("0123456789abcdef")


def parse_job_id(value: str | UUID) -> UUID:
    """Return ``value`` as a job id, refusing anything that is not a UUID.

    Raises:
        JobIdInvalid: before any statement is issued.
    """
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value).strip())
    except ValueError:
        raise JobIdInvalid(
            "that is not a job id (a UUID)", meta={"given": "..."}
        ) from None


def show(job_id: str | UUID) -> dict[str, Any]:
    """One job: its row, its steps, and the delays left in its retry schedule.

    Input, progress, result, history and each step's output are redacted
    (``REDACT_KEYS``), as every operator answer about a job is.

    Raises:
        JobIdInvalid, JobNotFound.
    """
    driver = get_driver()
    record = driver.get(parse_job_id(job_id))
    if record is None:
        raise JobNotFound("no job has that id", meta={"id": str(job_id)})
    answer = _job_dict(record)
    steps = list(driver.steps.list(record.run_id).values())
    answer["steps"] = [
        _step_dict(step) for step in sorted(steps, key=lambda s: s.started_at)
    ]
    return answer


def job_state(job_id: str | UUID) -> str | None:
    """The stored state of job ``job_id``, or ``None`` when no job has that id.

    One row read, no steps: for a command following a job it queued.

    Raises:
        JobIdInvalid: before any statement.
    """
    record = get_driver().get(parse_job_id(job_id))
    return None if record is None else str(record.state)


def retry(job_id: str | UUID, *, from_step: str | None = None) -> dict[str, Any]:
    """Requeue a finished job (``from_step`` drops that step and later ones).

    Raises:
        JobIdInvalid, JobNotFound, JobNotRequeueable, JobDuplicate.
        StepNotFound: the job's run has no step named ``from_step`` (its
            steps are named in the message and ``meta["steps"]``).
    """
    return _job_dict(get_driver().requeue(parse_job_id(job_id), from_step=from_step))


def cancel(job_id: str | UUID, *, reason: str | None = None) -> dict[str, Any]:
    """Cancel a live job; a running one stops at its next heartbeat.

    Raises:
        JobIdInvalid, JobNotCancellable.
        JobInputInvalid: ``reason`` is not text PostgreSQL can store.
    """
    problem = None if reason is None else text_problem(reason)
    if problem is not None:
        raise JobInputInvalid(
            f"the cancel reason {problem}",
            fix="pass a reason without NUL characters or lone surrogates",
        )
    return _job_dict(get_driver().cancel(parse_job_id(job_id), reason=reason))


def promote(job_id: str | UUID) -> dict[str, Any]:
    """Run a job waiting on its run time now."""
    return _job_dict(get_driver().promote(parse_job_id(job_id)))


def remove(job_id: str | UUID) -> dict[str, Any]:
    """Delete a job that is not running, with its steps.

    Raises:
        JobIdInvalid, JobNotFound, JobNotRemovable.
    """
    parsed = parse_job_id(job_id)
    if not get_driver().remove(parsed):
        raise JobNotFound("no job has that id", meta={"id": str(parsed)})
    return {"id": str(parsed), "removed": True}


def list_jobs(
    *,
    after: str | None = None,
    limit: int = DEFAULT_JOB_PAGE,
    **filters: Unpack[ListFilters],
) -> dict[str, Any]:
    """One page of jobs, newest first, and the cursor of the next page.

    ``filters`` are :func:`job_filter`'s (queue, name, state, tenant,
    id_prefix, created_from, created_to). ``after`` is the ``next`` cursor a previous page answered; ``next`` is
    ``None`` on a page shorter than ``limit`` (the last one).

    Raises:
        JobPageInvalid: a limit outside 1..200, a malformed cursor, state
            or id prefix, or an empty created range (before any statement).
    """
    _check_limit(limit)
    where = job_filter(**filters)
    records = get_driver().list_jobs(where, before=_cursor(after), limit=limit)
    jobs = [_job_summary(record) for record in records]
    full = len(records) == limit
    return {"jobs": jobs, "next": str(records[-1].id) if full else None}


def _check_limit(limit: Any) -> None:
    # The fix names the limit alone: `jobs leases` takes no cursor, and a
    # bad limit is about the limit whatever the listing.
    fix = f"pass a limit of 1 to {MAX_JOB_PAGE}"
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise JobPageInvalid(
            "limit must be a whole number", fix=fix, meta={"limit": limit}
        )
    if not 1 <= limit <= MAX_JOB_PAGE:
        raise JobPageInvalid(
            f"limit must be between 1 and {MAX_JOB_PAGE}",
            fix=fix,
            meta={"limit": limit},
        )


def job_filter(
    *,
    queue: str | None = None,
    name: str | None = None,
    state: str | Iterable[str] | None = None,
    tenant: str | None = None,
    id_prefix: str | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    error_code: str | None = None,
) -> JobFilter:
    """Validate listing filters into a :class:`JobFilter`.

    Raises:
        JobPageInvalid: an unknown state, a prefix that is not hex, an
            empty created range, an error code holding ``:``, text
            PostgreSQL cannot store (a NUL, a lone surrogate).
    """
    for what, value in (
        ("queue", queue),
        ("name", name),
        ("tenant", tenant),
        ("error_code", error_code),
    ):
        problem = None if value in (None, "") else text_problem(value)
        if problem is not None:
            # No row can hold it, and PostgreSQL would refuse the parameter.
            raise JobPageInvalid(
                f"the {what} filter {problem}",
                fix=f"pass the {what} filter as text without NUL characters or "
                "lone surrogates",
                meta={"filter": what},
            )
    if error_code is not None and (not error_code or ":" in error_code):
        raise JobPageInvalid(
            "an error code is the X_... before the colon of an error",
            fix="pass the code alone, e.g. X_JOB_TIMEOUT, not the whole error text",
            meta={"filter": "error_code", "error_code": error_code},
        )
    id_min = id_max = None
    if id_prefix is not None:
        id_min, id_max = _id_range(id_prefix)
    _check_created(created_from, created_to)
    return JobFilter(
        queue=queue or None,
        name=name or None,
        states=_states(state),
        tenant_id=tenant or None,
        id_min=id_min,
        id_max=id_max,
        created_from=created_from,
        created_to=created_to,
        error_code=error_code,
    )


def requeue_many(*, state: str = "dead", **scope: Unpack[BulkScope]) -> dict[str, int]:
    """Requeue up to 1,000 finished jobs (oldest first); call until ``remaining`` is 0.

    Raises:
        JobNotRequeueable: ``state`` is not a finished state.
    """
    where = job_filter(state=state, **scope)
    if not where.states or not where.states <= FINISHED_STATES:
        raise JobNotRequeueable(
            f"only finished jobs can be retried, not {state!r} ones",
            meta={"state": state},
        )
    return _bulk(get_driver().requeue_many(where, limit=MAX_BULK_ROWS))


def remove_many(
    *, state: str | None = None, **scope: Unpack[BulkScope]
) -> dict[str, int]:
    """Delete up to 1,000 jobs that are not running (oldest first).

    Raises:
        JobNotRemovable: ``state`` is ``running``.
    """
    where = job_filter(state=state, **scope)
    if where.states is not None and JobState.RUNNING in where.states:
        raise JobNotRemovable(
            "running jobs cannot be removed", meta={"state": "running"}
        )
    return _bulk(get_driver().remove_many(where, limit=MAX_BULK_ROWS))


def promote_many(
    *, state: str | None = None, **scope: Unpack[BulkScope]
) -> dict[str, int]:
    """Run up to 1,000 waiting (delayed, or ready in backoff) jobs now.

    Raises:
        JobNotPromotable: ``state`` is neither ``ready`` nor ``delayed``.
    """
    where = job_filter(state=state, **scope)
    if where.states is None:
        where = replace(where, states=PROMOTABLE_STATES)
    elif not where.states <= PROMOTABLE_STATES:
        raise JobNotPromotable(
            f"only ready or delayed jobs can be promoted, not {state!r} ones",
            meta={"state": state},
        )
    return _bulk(get_driver().promote_many(where, limit=MAX_BULK_ROWS))


def counters(*, window: timedelta = timedelta(hours=24)) -> list[dict[str, Any]]:
    """Per job name, outcomes settled in the last ``window`` (from the counters).

    ``mean_ms`` is the mean attempt duration and ``mean_pickup_ms`` the mean
    pickup latency (due to claimed), each ``None`` with no attempt.
    """
    driver = get_driver()
    since = driver.now() - window
    answer = []
    for total in driver.counter_totals(since):
        row = asdict(total)
        settled = total.done + total.retried + total.failed + total.dead
        row["mean_ms"] = round(total.duration_ms / settled) if settled else None
        pickups = total.pickups
        row["mean_pickup_ms"] = round(total.pickup_ms / pickups) if pickups else None
        answer.append(row)
    return answer


def pause_queue(queue: str) -> list[dict[str, Any]]:
    """Pause a queue; answers the paused list after the write."""
    return [_paused(p) for p in get_driver().pause_queue(checked_queue(queue))]


def resume_queue(queue: str) -> list[dict[str, Any]]:
    """Resume a queue; answers the paused list after the write."""
    return [_paused(p) for p in get_driver().resume_queue(checked_queue(queue))]


def stats() -> dict[str, Any]:
    """Depth per queue, the totals, and the paused queues."""
    driver = get_driver()
    queues = [_stats(s) for s in driver.stats()]
    totals = {
        bucket: sum(q[bucket] for q in queues)
        for bucket in ("ready", "delayed", "running", "suspended", "failed", "dead")
    }
    return {
        "driver": driver.name,
        "queues": queues,
        "totals": totals,
        "paused": [_paused(p) for p in driver.paused_queues()],
    }


def count(
    *, states: str | Iterable[str] | None = None, **scope: Unpack[BulkScope]
) -> int:
    """How many jobs match: one ``count(*)``, for health checks and scripts.

    ``states`` is one state name or several (``None``: any), matched on the
    stored state as :func:`list_jobs` filters it; ``scope`` narrows by queue,
    name, tenant or error code. Unlike :func:`stats` it splits nothing by due
    time, so a retry waiting out its backoff counts as ``ready``.

    Raises:
        JobPageInvalid: an unknown state (before any statement).
    """
    return get_driver().count(job_filter(state=states, **scope))


def workers() -> list[dict[str, Any]]:
    """Live worker processes."""
    return [_worker(w) for w in get_driver().workers()]


def leases(*, prefix: str = "", limit: int = MAX_JOB_PAGE) -> list[dict[str, Any]]:
    """Who holds what: lock and slot rows, sorted by key then slot.

    Lapsed rows are listed too (``expired``): a lapsed row stays until its
    slot is taken again. ``kind`` is ``lock`` (``lock(...)``), ``job`` or
    ``job-key`` (``job(concurrency=...)`` slots), ``leader`` (the cron
    scheduler's lease) or ``other``.

    Raises:
        JobPageInvalid: a limit outside 1..200, or a prefix that is not
            storable text (before any statement).
    """
    _check_limit(limit)
    if prefix and text_problem(prefix) is not None:
        raise JobPageInvalid(
            f"the lease prefix {text_problem(prefix)}",
            fix="pass a key prefix without NUL, such as lock: or job:, or none",
            meta={"filter": "prefix"},
        )
    return [
        {
            "key": r.key,
            "kind": _lease_kind(r.key),
            "slot": r.slot,
            "holder": r.holder,
            "token": r.fence,
            "expires_at": r.expires_at.isoformat(),
            "expired": r.expired,
        }
        for r in get_driver().leases.records(prefix=prefix, limit=limit)
    ]


def release_lock(key: str) -> dict[str, Any]:
    """Force-release a stuck lock: delete the rows of lease key ``key``.

    ``key`` as :func:`leases` lists it (``lock:invoice:42``). The lock is
    free at once. Its old holder is not told: if it is still running, it
    loses the lock at its next renewal, and its fenced writes are refused
    once the next holder has written (the next grant's token is greater).
    Only ``lock:`` rows: job slots and the leader lease come back by their
    ttl.

    Returns:
        ``{"key", "released"}``: the rows deleted (``slot``, ``holder``,
        ``token``, ``expires_at``, ``expired``).

    Raises:
        LockInvalid: ``key`` is not a ``lock:`` key (before any statement).
        LockNotFound: no row is stored under ``key``.
    """
    problem = text_problem(key)
    if problem is not None or not key.startswith("lock:") or key == "lock:":
        raise LockInvalid(
            f"the key to release {problem or 'is not a lock key (lock:...)'}",
            fix="pass the key as jobs leases lists it, e.g. lock:invoice:42 "
            "(job slots and the leader lease are freed by their ttl)",
            meta={"key": key if problem is None else None},
        )
    released = get_driver().leases.evict(key)
    if not released:
        raise LockNotFound(
            "no row is stored under that lock key: nothing to release",
            meta={"key": key},
        )
    logger.warning(
        "jobs.lock.force-released",
        extra={"key": key, "holder": released[0].holder, "token": released[0].fence},
    )
    return {
        "key": key,
        "released": [
            {
                "slot": r.slot,
                "holder": r.holder,
                "token": r.fence,
                "expires_at": r.expires_at.isoformat(),
                "expired": r.expired,
            }
            for r in released
        ],
    }


def _lease_kind(key: str) -> str:
    for prefix, kind in _LEASE_KINDS:
        if key.startswith(prefix):
            return kind
    return "other"


_LEASE_KINDS = (
    ("lock:", "lock"),
    ("job-key:", "job-key"),
    ("job:", "job"),
    (SCHEDULER_LEASE_KEY, "leader"),
)


def _check_created(start: Any, end: Any) -> None:
    """Refuse a created bound that is not an aware datetime, or an empty range."""
    for what, value in (("created_from", start), ("created_to", end)):
        if value is not None and (
            not isinstance(value, datetime) or value.utcoffset() is None
        ):
            raise JobPageInvalid(
                f"the {what} filter must be a timezone-aware datetime, "
                f"not {type(value).__name__}"
                + (" without a time zone" if isinstance(value, datetime) else ""),
                fix=f"pass {what} as a datetime, e.g. timezone.now() - timedelta(days=1)",
                meta={"filter": what},
            )
    if start is not None and end is not None and end <= start:
        raise JobPageInvalid(
            "the created range ends before it starts",
            fix="pass a created_to later than created_from",
            meta={"filter": "created_to"},
        )


def _states(state: Any) -> frozenset[JobState] | None:
    if state is None or state == "":
        return None
    if isinstance(state, str):
        names: list[Any] = [state]
    elif isinstance(state, Iterable) and not isinstance(state, bytes | Mapping):
        names = list(state)
    else:
        raise JobPageInvalid(
            f"the state filter must be a state name or a list of them, "
            f"not {type(state).__name__}",
            fix="pass e.g. 'dead' or ['ready', 'dead']",
            meta={"filter": "state"},
        )
    if not names:
        raise JobPageInvalid(
            "the state filter is an empty list, which no job matches",
            fix="pass at least one state, or leave the state filter out for any",
            meta={"filter": "state"},
        )
    known = {s.value: s for s in JobState}
    unknown = [n for n in names if not isinstance(n, str) or n not in known]
    if unknown:
        raise JobPageInvalid(
            f"unknown state {unknown[0]!r}",
            fix=f"pass one of {', '.join(known)}",
            meta={"state": unknown[0]},
        )
    return frozenset(known[n] for n in names)


def _id_range(prefix: str) -> tuple[UUID, UUID]:
    digits = str(prefix).strip().lower().replace("-", "")
    if not digits or len(digits) > 32 or not set(digits) <= _HEX:
        raise JobPageInvalid(
            "an id prefix is the start of a job id (hex digits)",
            fix="pass the first hex digits of a job id, e.g. 0190a3f2",
            meta={"filter": "id_prefix", "given": "..."},
        )
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


def _cursor(after: str | None) -> UUID | None:
    if after is None or after == "":
        return None
    try:
        return UUID(str(after))
    except ValueError:
        raise JobPageInvalid(
            "the after cursor is not one a page answered", meta={"cursor": "after"}
        ) from None


def _bulk(result: BulkResult) -> dict[str, int]:
    return {"affected": result.affected, "remaining": result.remaining}


def _job_summary(record: JobRecord) -> dict[str, Any]:
    return {
        "id": str(record.id),
        "name": record.name,
        "queue": record.queue,
        "state": record.state.value,
        "attempt": record.attempt,
        "max_attempts": record.max_attempts,
        "run_at": record.run_at.isoformat(),
        "created_at": record.created_at.isoformat(),
        "tenant_id": record.tenant_id,
        "last_error": record.last_error,
    }


def checked_queue(queue: str) -> str:
    """``queue`` if it is a queue name; else ``JobInputInvalid``."""
    _check_name(
        "queue",
        queue,
        lambda cause: JobInputInvalid(cause, fix=f"pass a queue name: {NAME_RULE}"),
    )
    return queue


# The structured job data a job's answer carries: redacted (REDACT_KEYS).
_JOB_DATA = ("input", "progress", "result", "history")


def _job_dict(record: JobRecord) -> dict[str, Any]:
    data = asdict(record)
    data["state"] = record.state.value
    for key in _JOB_DATA:
        data[key] = redact(data[key])
    for key, value in data.items():
        if isinstance(value, UUID):
            data[key] = str(value)
        elif hasattr(value, "isoformat"):
            data[key] = value.isoformat()
    handle = get_job(record.name)
    data["retry_delays_ms"] = (
        []
        if handle is None
        else [
            backoff_delay_ms(handle.retry, n, jitter=False)
            for n in range(max(record.attempt, 1), handle.retry.attempts)
        ]
    )
    return data


def _stats(entry: QueueStats) -> dict[str, Any]:
    return asdict(entry)


def _paused(entry: PausedName) -> dict[str, Any]:
    return {"name": entry.name, "paused_at": entry.paused_at.isoformat()}


def _worker(entry: WorkerRecord) -> dict[str, Any]:
    data = asdict(entry)
    for key in ("started_at", "heartbeat_at", "expires_at"):
        data[key] = data[key].isoformat()
    return data


def _step_dict(step: StepRecord) -> dict[str, Any]:
    duration = None
    if step.completed_at is not None:
        duration = round((step.completed_at - step.started_at).total_seconds() * 1000)
    return {
        "name": step.name,
        "status": step.status,
        "started_at": step.started_at.isoformat(),
        "completed_at": step.completed_at.isoformat() if step.completed_at else None,
        "wake_at": step.wake_at.isoformat() if step.wake_at else None,
        "duration_ms": duration,
        "attempts": step.attempts,
        "event": step.event,
        "error": step.error,
        # A wait_for_event step's output is the event's payload.
        "output": redact(step.output),
    }


# -- cron tasks ---------------------------------------------------------------


def pause_task(task: str) -> list[dict[str, Any]]:
    """Pause a declared cron task; answers the paused tasks after the write.

    A paused task is skipped when due, its watermark untouched; on resume
    its ``catch_up`` policy decides what it missed.

    Raises:
        TaskUnknown: no task is declared under that name (nothing written).
    """
    return [_paused(p) for p in get_driver().cron.pause_task(checked_task(task))]


def resume_task(task: str) -> list[dict[str, Any]]:
    """Resume a cron task; answers the paused tasks after the write.

    Raises:
        TaskUnknown: no task is declared under that name (nothing written).
    """
    return [_paused(p) for p in get_driver().cron.resume_task(checked_task(task))]


def run_task(task: str) -> list[dict[str, Any]]:
    """Enqueue a declared task's jobs now, outside its schedule.

    Its watermark is untouched; the jobs are recorded as enqueued by
    ``task:<name>``. Answers one entry per job (``id``, ``run_id``,
    ``deduped``).

    Raises:
        TaskUnknown: no task is declared under that name (nothing written).
        JobInputInvalid: the task's ``enqueue`` answer was refused.
    """
    from .crontask import get_task

    handle = get_task(checked_task(task))
    assert handle is not None  # checked_task refused unknown names
    return [
        {"id": str(e.id), "run_id": str(e.run_id), "deduped": e.deduped}
        for e in handle.run_now()
    ]


def tasks() -> list[dict[str, Any]]:
    """Every cron task: declared here, stored, or both, sorted by name.

    Each entry carries the schedule, the next run, the last fire and the
    pause; ``declared`` is false for a stored task no code declares any
    more, ``armed`` false for a declared task no scheduler has seen yet.
    """
    from datetime import datetime

    from .crontask import registered_tasks

    stored = {record.name: record for record in get_driver().cron.task_list()}
    paused = {p.name: p.paused_at for p in get_driver().cron.paused_tasks()}
    declared = {handle.name: handle for handle in registered_tasks()}
    now = datetime.now(UTC)
    listing = []
    for name in sorted(stored.keys() | declared.keys()):
        record, handle = stored.get(name), declared.get(name)
        next_run = record.next_run_at if record else None
        if handle is not None and (record is None or next_run is None):
            next_run = handle.next_run(now)
        listing.append(
            {
                "name": name,
                "cron": handle.cron if handle else record.cron,  # type: ignore[union-attr]
                "tz": handle.tz if handle else record.tz,  # type: ignore[union-attr]
                "catch_up": handle.catch_up if handle else None,
                "declared": handle is not None,
                "armed": record is not None,
                "next_run": _iso(next_run),
                "last_occurrence": _iso(record.last_occurrence if record else None),
                "fired_at": _iso(record.fired_at if record else None),
                "paused": name in paused,
                "paused_at": _iso(paused.get(name)),
            }
        )
    return listing


def checked_task(task: str) -> str:
    """``task`` if a cron task is declared under it; else ``TaskUnknown``."""
    from .crontask import get_task
    from .errors import TaskUnknown

    if not isinstance(task, str) or get_task(task) is None:
        raise TaskUnknown(
            "no cron task is declared under that name", meta={"task": str(task)}
        )
    return task


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()
