"""``backfill(...)``: one paced, resumable pass over every row a QuerySet matches.

A backfill is a job (``ultimate_jobs.backfill.<name>``, keyed by its name:
one live pass per backfill) whose body walks the source in keyset pages
(``pk > cursor ORDER BY pk LIMIT batch``, never OFFSET, never the whole
QuerySet) and handles each page inside its own durable step. A completed
step never runs again, so a worker killed mid-pass is followed by one that
replays the pages done and goes on with the first unfinished one. With
``atomic=True`` (the default) the page's writes, its step record and the
``Backfill`` row's progress commit in one transaction: each page is handled
exactly once.

Pacing is ``rate`` pages a second. A wait under ``DURABLE_PACE_S`` is sat
out in the body (cancellable, the slot held: a durable sleep would cost a
suspension and a re-claim per page); a longer one is a durable
``ctx.step.sleep`` that frees the slot.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import transaction
from django.db.models import (
    Case,
    CharField,
    IntegerField,
    QuerySet,
    TextField,
    UUIDField,
    Value,
    When,
)
from django.db.models.functions import Now
from django.db.models.query import ModelIterable

from .errors import (
    BackfillApplied,
    BackfillDeclarationInvalid,
    BackfillPaused,
    BackfillRequiresCycle,
    BackfillRequiresPending,
    BackfillSourceInvalid,
    BackfillStateInvalid,
    BackfillUnknown,
    JobDuplicate,
    JobsError,
    RateLimited,
)
from .jobs import job
from .maintenance.builtin import housekeeping_queue
from .retry import Retry
from .validation import MAX_NAME_LENGTH as job_name_limit
from .validation import name_problem

if TYPE_CHECKING:
    from .context import JobContext
    from .drivers.base import Enqueued
    from .jobs import JobHandle

__all__ = [
    "BACKFILL_JOB_PREFIX",
    "BackfillSpec",
    "backfill",
    "enqueue_backfill",
    "get_backfill",
    "pause_backfill",
    "plan_backfill",
    "registered_backfills",
    "requirement_order",
    "resume_backfill",
    "unmet_requirements",
]

logger = logging.getLogger("django_ultimate_jobs")

BACKFILL_JOB_PREFIX = "ultimate_jobs.backfill."
DEFAULT_BATCH = 1000
DEFAULT_RATE = 5.0
DEFAULT_RETRY = Retry(attempts=10)
"""More attempts than a plain job: a long pass outlives a deploy or two."""
MIN_RATE = 1 / 86400
"""The slowest pace: one page a day (slower would overflow a sleep)."""
MAX_RATE = 1000.0
"""The fastest pace: a page a millisecond (a backfill is never unpaced)."""
MAX_NAME_LENGTH = job_name_limit - len(BACKFILL_JOB_PREFIX)
"""The longest backfill name: its job name adds the prefix (177 characters)."""
DURABLE_PACE_S = 30.0
"""Waits at least this long between pages are durable sleeps (slot freed)."""
REQUIRES_POLL_S = 5.0
"""How often a pass waiting on its ``requires=`` looks again."""
# Codes that stop an attempt without judging the pass: the row is not
# marked failed for them (the next attempt picks up where this one was).
_NOT_A_FAILURE = frozenset(
    {"X_ABORTED", "X_DRAINING", "X_JOB_LEASE_LOST", "X_RATE_LIMITED"}
)

_backfills: dict[str, BackfillSpec] = {}


@dataclass(frozen=True, slots=True)
class BackfillSpec:
    """A declared backfill (what :func:`backfill` registered)."""

    name: str
    source: Callable[[], QuerySet[Any]]
    handle: Callable[[list[Any]], object]
    batch: int
    rate: float
    requires: tuple[str, ...]
    count: Callable[[], int] | None
    atomic: bool
    job: JobHandle[Any]
    origin: str

    def total(self) -> int:
        """Rows the pass will visit: ``count()``, else the source's own count."""
        value = self.count() if self.count is not None else _queryset(self).count()
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BackfillSourceInvalid(
                f"count() of backfill {self.name!r} answered {value!r}, "
                "not a whole number >= 0",
                fix="make count= answer how many rows the pass visits",
                meta={"backfill": self.name},
            )
        return value

    def interval_s(self) -> float:
        """Seconds between the starts of two pages."""
        return 1.0 / self.rate


def backfill(
    *,
    name: str,
    source: Callable[[], QuerySet[Any]],
    handle: Callable[[list[Any]], object],
    batch: int = DEFAULT_BATCH,
    rate: float = DEFAULT_RATE,
    requires: Iterable[str] = (),
    count: Callable[[], int] | None = None,
    atomic: bool = True,
    queue: str | Callable[[], str] = housekeeping_queue,
    retry: Retry | None = None,
    timeout: str | int | None = None,
) -> JobHandle[Any]:
    """Declare a backfill; answers its job handle (input: ``force=False``).

    Args:
        name: the durable name (the ``Backfill`` row, the job's key).
        source: answers the QuerySet to walk; asked at every page, so it
            stays lazy. Pages follow the primary key.
        handle: called with each page, a list of model instances. With
            ``atomic=False`` a page may be handled again after a crash:
            write idempotently (update-where, upsert), never ``count + 1``.
        batch: rows per page.
        rate: pages per second (0.5 = one page every 2 s).
        requires: names of backfills that must be done before this one runs.
        count: answers how many rows the pass will visit (default: the
            source's ``count()``); shown by the dry run and the progress.
        atomic: run each page, its step record and its progress in one
            transaction (exactly once for database writes).
        queue: the queue its job goes to (default ``HOUSEKEEPING_QUEUE``,
            which every worker serves).
        retry: the job's retry policy (default 10 attempts).
        timeout: a per-attempt deadline.

    Raises:
        BackfillDeclarationInvalid: an argument is refused (nothing registered).
        JobDuplicate: another declaration holds the name.
    """
    requirements = _check_declaration(
        name, source, handle, batch, rate, requires, count
    )
    origin = (
        f"{getattr(handle, '__module__', '?')}.{getattr(handle, '__qualname__', '?')}"
    )
    existing = _backfills.get(name)
    if existing is not None and existing.origin != origin:
        # Before the job is declared: a refused backfill leaves nothing behind.
        raise JobDuplicate(
            f"two backfills are declared with the name {name!r} "
            f"({existing.origin} and {origin})",
            fix="give one of them another name=...",
            meta={"name": name},
        )

    def run_pass(ctx: JobContext, *, force: bool = False) -> dict[str, Any]:
        return _run_pass(get_backfill(name), ctx, force)

    run_pass.__qualname__ = run_pass.__name__ = f"backfill_{name}"
    run_pass.__doc__ = f"The pass of backfill {name!r}."
    handle_ = job(
        name=BACKFILL_JOB_PREFIX + name,
        queue=queue,
        retry=retry if retry is not None else DEFAULT_RETRY,
        timeout=timeout,
        idempotency_key=lambda _input: name,
    )(run_pass)
    spec = BackfillSpec(
        name=name,
        source=source,
        handle=handle,
        batch=batch,
        rate=float(rate),
        requires=requirements,
        count=count,
        atomic=atomic,
        job=handle_,
        origin=origin,
    )
    _backfills[name] = spec
    return handle_


def _check_declaration(
    name: Any,
    source: Any,
    handle: Any,
    batch: Any,
    rate: Any,
    requires: Any,
    count: Any,
) -> tuple[str, ...]:
    problems = []
    name_wrong = name_problem(name)
    if name_wrong is None and len(name) > MAX_NAME_LENGTH:
        name_wrong = f"must be at most {MAX_NAME_LENGTH} characters, not {len(name)}"
    if name_wrong is not None:
        problems.append(f"name {name_wrong}")
    for option, value in (("source", source), ("handle", handle)):
        if not callable(value):
            problems.append(f"{option} must be a callable")
    if count is not None and not callable(count):
        problems.append("count must be a callable or None")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        problems.append(f"batch must be a whole number >= 1, got {batch!r}")
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or not MIN_RATE <= rate <= MAX_RATE
    ):
        problems.append(
            f"rate must be a number of pages/s from {MIN_RATE:.3g} (one a day) "
            f"to {MAX_RATE:g}, got {rate!r}"
        )
    requirements: tuple[str, ...] = ()
    if isinstance(requires, str) or not isinstance(requires, Iterable):
        problems.append("requires must be a list of backfill names")
    else:
        requirements = tuple(requires)
        if not all(isinstance(r, str) and r for r in requirements):
            problems.append("requires must hold backfill names (non-empty strings)")
        elif name in requirements:
            problems.append("a backfill cannot require itself")
    if problems:
        # A name refused for its length is shown shortened.
        shown = name[:60] + "..." if isinstance(name, str) and len(name) > 60 else name
        raise BackfillDeclarationInvalid(
            f"backfill {shown!r} is invalid: " + "; ".join(problems),
            meta={"backfill": str(shown), "problems": problems},
        )
    return requirements


# -- registry -------------------------------------------------------------------


def registered_backfills() -> list[BackfillSpec]:
    """Every declared backfill, by name."""
    return [_backfills[name] for name in sorted(_backfills)]


def get_backfill(name: str) -> BackfillSpec:
    """The backfill declared under ``name``.

    Raises:
        BackfillUnknown: none is.
    """
    spec = _backfills.get(name)
    if spec is None:
        raise BackfillUnknown(
            f"no backfill is declared under the name {name!r}", meta={"backfill": name}
        )
    return spec


def unregister_backfill(name: str) -> None:
    """Forget a backfill and its job (tests and docs examples declare them on the fly)."""
    from .registry import unregister

    _backfills.pop(name, None)
    unregister(BACKFILL_JOB_PREFIX + name)


def requirement_order(names: Iterable[str]) -> list[str]:
    """``names`` and everything they require, requirements first.

    Ties keep name order, so the order is stable from run to run.

    Raises:
        BackfillUnknown: a name (or a ``requires=`` entry) is not declared.
        BackfillRequiresCycle: the requirements form a cycle.
    """
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            loop = [*visiting[visiting.index(name) :], name]
            raise BackfillRequiresCycle(
                "the requires= of these backfills form a cycle: " + " -> ".join(loop),
                meta={"cycle": loop},
            )
        visiting.append(name)
        for requirement in get_backfill(name).requires:
            if requirement not in _backfills:
                raise BackfillUnknown(
                    f"backfill {name!r} requires {requirement!r}, "
                    "which no backfill declares",
                    fix=f"declare {requirement!r} or remove it from the "
                    f"requires= of {name!r}",
                    meta={"backfill": name, "requirement": requirement},
                )
            visit(requirement)
        visiting.pop()
        order.append(name)

    for name in sorted(names):
        visit(name)
    return order


def unmet_requirements(spec: BackfillSpec) -> list[str]:
    """The backfills ``spec`` requires (directly or not) that are not done.

    Raises:
        BackfillUnknown, BackfillRequiresCycle: as :func:`requirement_order`.
    """
    from .models import Backfill

    needed = [name for name in requirement_order([spec.name]) if name != spec.name]
    done = set(
        Backfill.objects.filter(name__in=needed, state=Backfill.State.DONE).values_list(
            "name", flat=True
        )
    )
    return [name for name in needed if name not in done]


# -- operator verbs -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What a dry run reports: the rows and pages a pass would handle."""

    name: str
    state: str
    rows: int
    pages: int
    seconds: float
    unmet: list[str]


def plan_backfill(name: str) -> BackfillPlan:
    """Count what a pass of ``name`` would do, writing nothing.

    Raises:
        BackfillUnknown, BackfillRequiresCycle: as :func:`requirement_order`.
    """
    spec = get_backfill(name)
    unmet = unmet_requirements(spec)
    _queryset(spec)  # what --write would refuse, the dry run refuses
    try:
        rows = spec.total()
    except JobsError:
        raise
    except Exception as error:
        # The dry run names the culprit rather than print a traceback.
        raise BackfillSourceInvalid(
            f"counting the rows of backfill {name!r} raised "
            f"{type(error).__name__}: {error}",
            fix="make count= (or the source's count()) answer a whole number",
            meta={"backfill": name},
        ) from error
    pages = math.ceil(rows / spec.batch)
    return BackfillPlan(
        name=name,
        state=state_of(name),
        rows=rows,
        pages=pages,
        seconds=max(0, pages - 1) * spec.interval_s(),
        unmet=unmet,
    )


def state_of(name: str) -> str:
    """The stored state of ``name`` (``pending`` before its first pass)."""
    from .models import Backfill

    row = Backfill.objects.filter(name=name).values_list("state", flat=True).first()
    return row or Backfill.State.PENDING


def enqueue_backfill(
    name: str, *, force: bool = False, check_requirements: bool = True
) -> Enqueued:
    """Gate, then enqueue the pass of ``name`` (it runs on a worker).

    In the same transaction the ``Backfill`` row becomes the new pass's
    (``pending``, its ``run_id``; reset with ``force``), so whoever follows
    the row never reads the previous pass's outcome. A live pass is not
    queued twice: the answer is that pass (``deduped``), the row untouched.

    Args:
        force: run a done (or paused) backfill again, from its first row.
        check_requirements: refuse while a ``requires=`` is not done
            (``--all`` enqueues in dependency order and lets the passes wait).

    Raises:
        BackfillUnknown, BackfillRequiresCycle: as :func:`requirement_order`.
        BackfillApplied: it is done and ``force`` is not set.
        BackfillPaused: it is paused and ``force`` is not set.
        BackfillRequiresPending: a requirement is not done.
    """
    from .models import Backfill

    spec = get_backfill(name)
    unmet = unmet_requirements(spec)
    with transaction.atomic():
        row, _ = Backfill.objects.select_for_update().get_or_create(name=name)
        if row.state == Backfill.State.DONE and not force:
            raise BackfillApplied(
                f"backfill {name!r} is done already",
                fix=f"python manage.py jobs_backfill {name} --write --force",
                meta={"backfill": name},
            )
        if row.state == Backfill.State.PAUSED and not force:
            raise BackfillPaused(
                f"backfill {name!r} is paused", meta={"backfill": name}
            )
        if unmet and check_requirements:
            raise BackfillRequiresPending(
                f"backfill {name!r} requires {', '.join(unmet)}, not done yet",
                meta={"backfill": name, "unmet": unmet},
            )
        enqueued = spec.job.enqueue(force=force)
        if not enqueued.deduped:
            _mark_queued(row, enqueued.run_id, reset=force)
    return enqueued


def _mark_queued(row: Any, run_id: UUID, *, reset: bool) -> None:
    """Make the row the queued pass's (in the enqueue's transaction).

    Whoever follows the row then sees this pass's outcome, never the
    previous pass's ``done`` or ``failed``.
    """
    from .models import Backfill

    if reset:
        row.cursor, row.rows_done, row.pages_done, row.total = None, 0, 0, None
        row.started_at = row.finished_at = None
    row.state = Backfill.State.PENDING
    row.run_id = run_id
    row.error = ""
    row.updated_at = Now()
    row.save()


def pause_backfill(name: str) -> None:
    """Pause ``name``: its pass stops before its next page.

    Raises:
        BackfillUnknown: not declared.
        BackfillStateInvalid: it is done or paused already.
    """
    from .models import Backfill

    get_backfill(name)
    with transaction.atomic():
        row, _ = Backfill.objects.select_for_update().get_or_create(name=name)
        if row.state in (Backfill.State.DONE, Backfill.State.PAUSED):
            raise BackfillStateInvalid(
                f"backfill {name!r} is {row.state}: there is nothing to pause",
                meta={"backfill": name},
            )
        row.state = Backfill.State.PAUSED
        row.save(update_fields=["state", "updated_at"])


def resume_backfill(name: str) -> Enqueued:
    """Resume a paused ``name``: a pass continues after its last row done.

    Returns:
        The queued pass (``deduped`` when the paused pass is still live and
        goes on by itself).

    Raises:
        BackfillUnknown: not declared.
        BackfillStateInvalid: it is not paused.
    """
    from .models import Backfill

    spec = get_backfill(name)
    with transaction.atomic():
        row = (
            Backfill.objects.select_for_update()
            .filter(name=name, state=Backfill.State.PAUSED)
            .first()
        )
        if row is None:
            raise BackfillStateInvalid(
                f"backfill {name!r} is not paused: there is nothing to resume",
                meta={"backfill": name},
            )
        # In the same transaction: a resume that could not enqueue leaves
        # the backfill paused, not pending with no pass coming.
        enqueued = spec.job.enqueue(force=False)
        if enqueued.deduped:
            # The paused pass is still live: it goes on by itself.
            row.state, row.updated_at = Backfill.State.PENDING, Now()
            row.save(update_fields=["state", "updated_at"])
        else:
            _mark_queued(row, enqueued.run_id, reset=False)
        return enqueued


# -- the pass -------------------------------------------------------------------


def _run_pass(spec: BackfillSpec, ctx: JobContext, force: bool) -> dict[str, Any]:
    try:
        unmet = unmet_requirements(spec)
        if unmet:
            # "Not yet", not a failure: no attempt spent, the row left alone.
            raise RateLimited(
                REQUIRES_POLL_S,
                cause=f"backfill {spec.name!r} waits for {', '.join(unmet)}",
            )
        return _walk(spec, ctx, force)
    except JobsError as error:
        if error.code not in _NOT_A_FAILURE:
            _mark_failed(spec.name, error.render())
        raise
    except Exception as error:
        _mark_failed(spec.name, f"{type(error).__name__}: {error}")
        raise


def _walk(spec: BackfillSpec, ctx: JobContext, force: bool) -> dict[str, Any]:
    start = ctx.step.run("start", _begin, spec, str(ctx.run_id), force, atomic=True)
    if start["skip"]:
        return {"backfill": spec.name, "skipped": start["skip"]}
    cursor, page, rows = start["cursor"], start["page"], start["rows"]
    first_page, last_ran_at = page, None  # monotonic start of the last page run
    while True:
        if state_of(spec.name) == "paused":
            return {"backfill": spec.name, "paused": True, "rows": rows}
        if page > first_page:
            _pace(spec, ctx, page, last_ran_at)
        began = time.monotonic()
        name = f"page-{page}"
        out = ctx.step.run(
            name, _handle_page, spec, cursor, page, rows, atomic=spec.atomic
        )
        # A replayed page did no work now: the next one need not wait for it.
        last_ran_at = None if ctx.step.replayed[-1:] == [name] else began
        count = _checkpoint(spec, out)
        if count:
            cursor, rows, page = out["cursor"], rows + count, page + 1
        if count < spec.batch:
            break
    ctx.step.run("finish", _finish, spec.name, atomic=True)
    return {"backfill": spec.name, "rows": rows, "pages": page}


def _pace(
    spec: BackfillSpec, ctx: JobContext, page: int, last_ran_at: float | None
) -> None:
    interval = spec.interval_s()
    if interval >= DURABLE_PACE_S:
        # Always named and always called: a replay meets the same sleeps.
        ctx.step.sleep(f"pace-{page}", timedelta(seconds=interval))
        return
    if last_ran_at is not None:
        # The page's own time counts toward the interval.
        wait = interval - (time.monotonic() - last_ran_at)
        if wait > 0.001 and ctx.cancellation.wait(wait):
            ctx.cancellation.raise_if_cancelled()


def _checkpoint(spec: BackfillSpec, out: Any) -> int:
    # A step output is read back from storage: refuse a malformed one
    # rather than restart from the top.
    if (
        not isinstance(out, Mapping)
        or not isinstance(out.get("rows"), int)
        or out["rows"] < 0
    ):
        raise BackfillSourceInvalid(
            f"a page checkpoint of backfill {spec.name!r} is malformed: {out!r}",
            meta={"backfill": spec.name},
        )
    return int(out["rows"])


def _begin(spec: BackfillSpec, run_id: str, force: bool) -> dict[str, Any]:
    from .models import Backfill

    row, _ = Backfill.objects.select_for_update().get_or_create(name=spec.name)
    if row.state == Backfill.State.DONE and not force:
        return {"skip": "done"}
    if row.state == Backfill.State.PAUSED and not force:
        return {"skip": "paused"}
    if force:
        row.cursor, row.rows_done, row.pages_done = None, 0, 0
        row.started_at = row.finished_at = None
    row.state = Backfill.State.RUNNING
    row.run_id = UUID(run_id)
    row.error = ""
    row.total = _expected_total(spec, row.cursor, row.rows_done)
    if row.started_at is None:
        row.started_at = _db_now()
    row.save()
    return {
        "skip": None,
        "cursor": row.cursor,
        "page": row.pages_done,
        "rows": row.rows_done,
    }


def _expected_total(spec: BackfillSpec, cursor: Any, rows_done: int) -> int:
    if spec.count is not None or cursor is None:
        return spec.total()
    # Resumed without a count(): the rows done plus those past the cursor.
    return rows_done + _queryset(spec).filter(pk__gt=cursor).count()


def _handle_page(
    spec: BackfillSpec, cursor: Any, page: int, rows_before: int
) -> dict[str, Any]:
    from .models import Backfill

    queryset = _queryset(spec)
    if cursor is not None:
        queryset = queryset.filter(pk__gt=cursor)
    batch = list(queryset.order_by("pk")[: spec.batch])
    if not batch:
        return {"cursor": cursor, "rows": 0}
    spec.handle(batch)
    last = _cursor_value(spec, batch[-1].pk)
    paused = Backfill.State.PAUSED
    Backfill.objects.filter(name=spec.name).update(
        cursor=last,
        rows_done=rows_before + len(batch),
        pages_done=page + 1,
        updated_at=Now(),
        # An operator's pause, made while this page ran, stands.
        state=Case(
            When(state=paused, then=Value(paused)),
            default=Value(Backfill.State.RUNNING),
        ),
    )
    return {"cursor": last, "rows": len(batch)}


def _finish(name: str) -> None:
    from .models import Backfill

    Backfill.objects.filter(name=name).update(
        state=Backfill.State.DONE, finished_at=Now(), updated_at=Now(), error=""
    )


def _mark_failed(name: str, error: str) -> None:
    from django.db import close_old_connections

    from .models import Backfill

    try:
        # The row may not exist yet: a start step that failed rolled it back.
        Backfill.objects.get_or_create(name=name)
        Backfill.objects.filter(name=name).exclude(state=Backfill.State.PAUSED).update(
            state=Backfill.State.FAILED, error=error[:2000], updated_at=Now()
        )
    except Exception:
        # Progress bookkeeping must not hide the error that failed the pass;
        # a connection the failure broke is dropped, not kept for the next job.
        logger.warning("jobs.backfill.ledger-failed", extra={"backfill": name})
        close_old_connections()


def _queryset(spec: BackfillSpec) -> QuerySet[Any]:
    """``source()``, refused (terminally) unless a pass can walk it in pages."""
    queryset = spec.source()
    if not isinstance(queryset, QuerySet):
        raise BackfillSourceInvalid(
            f"source() of backfill {spec.name!r} answered a "
            f"{type(queryset).__name__}, not a QuerySet",
            meta={"backfill": spec.name},
        )
    problem = _walk_problem(queryset)
    if problem is not None:
        raise BackfillSourceInvalid(
            f"source() of backfill {spec.name!r} answered {problem}",
            fix="make source= answer Model.objects.filter(...): no slice, "
            ".values() or union, on a model with a simple primary key",
            meta={"backfill": spec.name},
        )
    return queryset


def _walk_problem(queryset: QuerySet[Any]) -> str | None:
    # Each page is source().filter(pk__gt=cursor).order_by("pk")[:batch]:
    # a slice or a union cannot be filtered again, and handle() is given
    # model instances, not the dicts or tuples of .values().
    if queryset.query.is_sliced:
        return "a sliced QuerySet: the pass takes the pages itself (filter instead)"
    if queryset.query.combinator:
        return f"a {queryset.query.combinator}() of QuerySets, which cannot be paged"
    if queryset._iterable_class is not ModelIterable:
        return "a .values()/.values_list() QuerySet: handle() takes model instances"
    field = queryset.model._meta.pk
    while field is not None and field.is_relation:
        field = field.target_field  # a one-to-one primary key: the key it holds
    if not isinstance(field, IntegerField | CharField | TextField | UUIDField):
        kind = type(field).__name__
        return (
            f"a QuerySet of {queryset.model.__name__}, whose primary key is a "
            f"{kind}: keyset pages need a number, a string or a UUID"
        )
    return None


def _cursor_value(spec: BackfillSpec, pk: Any) -> int | str:
    if isinstance(pk, UUID):
        return str(pk)
    if isinstance(pk, int | str) and not isinstance(pk, bool):
        return pk
    raise BackfillSourceInvalid(
        f"backfill {spec.name!r} walks a model whose primary key is a "
        f"{type(pk).__name__}: keyset pages need a number, a string or a UUID",
        meta={"backfill": spec.name},
    )


def _db_now() -> datetime:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now  # type: ignore[no-any-return]
