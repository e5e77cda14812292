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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from .errors import (
    BackfillApplied,
    BackfillDeclarationInvalid,
    BackfillPaused,
    BackfillRequiresCycle,
    BackfillRequiresPending,
    BackfillSourceInvalid,
    BackfillStateInvalid,
    BackfillUnknown,
    JobsError,
    RateLimited,
)
from .keyset.declarations import Declarations, Problems, pass_job
from .keyset.ledger import Ledger, Refusals
from .keyset.pages import cursor_value, expected_total, page_after, paging_problem
from .keyset.walk import (
    DURABLE_PACE_S,
    MAX_RATE,
    MIN_RATE,
    Pacer,
    Position,
    walk,
)
from .maintenance.builtin import housekeeping_queue
from .retry import Retry
from .validation import MAX_NAME_LENGTH as job_name_limit

if TYPE_CHECKING:
    from .context import JobContext
    from .drivers.base import Enqueued
    from .jobs import JobHandle

__all__ = [
    "BACKFILL_JOB_PREFIX",
    "DURABLE_PACE_S",
    "MAX_RATE",
    "MIN_RATE",
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

BACKFILL_JOB_PREFIX = "ultimate_jobs.backfill."
DEFAULT_BATCH = 1000
DEFAULT_RATE = 5.0
MAX_NAME_LENGTH = job_name_limit - len(BACKFILL_JOB_PREFIX)
"""The longest backfill name: its job name adds the prefix (177 characters)."""
REQUIRES_POLL_S = 5.0
"""How often a pass waiting on its ``requires=`` looks again."""
_REFUSALS = Refusals(
    applied=lambda cause, **more: BackfillApplied(cause, **more),
    paused=lambda cause, **more: BackfillPaused(cause, **more),
    state_invalid=lambda cause, **more: BackfillStateInvalid(cause, **more),
)

_backfills: Declarations[BackfillSpec] = Declarations(
    "backfill", lambda cause, **more: BackfillUnknown(cause, **more)
)


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

    def ledger(self) -> Ledger:
        """Its progress row, the ``Backfill`` of its name."""
        from .models import Backfill

        return Ledger(
            kind="backfill",
            model=Backfill,
            lookup={"name": self.name},
            label=f"backfill {self.name!r}",
            meta={"backfill": self.name},
            refusals=_REFUSALS,
            rerun_fix=f"python manage.py jobs_backfill {self.name} --write --force",
        )


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
    # Before the job is declared: a refused backfill leaves nothing behind.
    _backfills.check_free(name, origin)

    def run_pass(ctx: JobContext, *, force: bool = False) -> dict[str, Any]:
        return _run_pass(get_backfill(name), ctx, force)

    handle_ = pass_job(
        run_pass,
        kind="backfill",
        name=name,
        prefix=BACKFILL_JOB_PREFIX,
        key=lambda _input: name,
        queue=queue,
        retry=retry,
        timeout=timeout,
    )
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
    _backfills.add(spec)
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
    problems = Problems()
    problems.name(name, MAX_NAME_LENGTH)
    for option, value in (("source", source), ("handle", handle)):
        if not callable(value):
            problems.append(f"{option} must be a callable")
    if count is not None and not callable(count):
        problems.append("count must be a callable or None")
    problems.whole("batch", batch)
    problems.rate(rate)
    requirements: tuple[str, ...] = ()
    if isinstance(requires, str) or not isinstance(requires, Iterable):
        problems.append("requires must be a list of backfill names")
    else:
        requirements = tuple(requires)
        if not all(isinstance(r, str) and r for r in requirements):
            problems.append("requires must hold backfill names (non-empty strings)")
        elif name in requirements:
            problems.append("a backfill cannot require itself")
    problems.raise_if_any(
        lambda cause, **more: BackfillDeclarationInvalid(cause, **more),
        "backfill",
        name,
    )
    return requirements


# -- registry -------------------------------------------------------------------


def registered_backfills() -> list[BackfillSpec]:
    """Every declared backfill, by name."""
    return _backfills.all()


def get_backfill(name: str) -> BackfillSpec:
    """The backfill declared under ``name``.

    Raises:
        BackfillUnknown: none is.
    """
    return _backfills.get(name)


def unregister_backfill(name: str) -> None:
    """Forget a backfill and its job (tests and docs examples declare them on the fly)."""
    _backfills.forget(name)


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
            if not _backfills.holds(requirement):
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
    spec = get_backfill(name)
    unmet = unmet_requirements(spec)

    def check(_row: Any) -> None:
        if unmet and check_requirements:
            raise BackfillRequiresPending(
                f"backfill {name!r} requires {', '.join(unmet)}, not done yet",
                meta={"backfill": name, "unmet": unmet},
            )

    return spec.ledger().enqueue(
        lambda: spec.job.enqueue(force=force), force=force, check=check
    )


def pause_backfill(name: str) -> None:
    """Pause ``name``: its pass stops before its next page.

    Raises:
        BackfillUnknown: not declared.
        BackfillStateInvalid: it is done or paused already.
    """
    get_backfill(name).ledger().pause()


def resume_backfill(name: str) -> Enqueued:
    """Resume a paused ``name``: a pass continues after its last row done.

    Returns:
        The queued pass (``deduped`` when the paused pass is still live and
        goes on by itself).

    Raises:
        BackfillUnknown: not declared.
        BackfillStateInvalid: it is not paused.
    """
    spec = get_backfill(name)
    return spec.ledger().resume(lambda _row: spec.job.enqueue(force=False))


# -- the pass -------------------------------------------------------------------


def _run_pass(spec: BackfillSpec, ctx: JobContext, force: bool) -> dict[str, Any]:
    with spec.ledger().failures():
        unmet = unmet_requirements(spec)
        if unmet:
            # "Not yet", not a failure: no attempt spent, the row left alone.
            raise RateLimited(
                REQUIRES_POLL_S,
                cause=f"backfill {spec.name!r} waits for {', '.join(unmet)}",
            )
        return _walk(spec, ctx, force)


def _walk(spec: BackfillSpec, ctx: JobContext, force: bool) -> dict[str, Any]:
    ledger = spec.ledger()
    start = ctx.step.run(
        "start",
        ledger.begin,
        str(ctx.run_id),
        force,
        total=partial(_expected_total, spec),
        atomic=True,
    )
    if start["skip"]:
        return {"backfill": spec.name, "skipped": start["skip"]}
    end, paused = walk(
        ctx,
        start=Position(start["cursor"], start["page"], start["rows"]),
        batch=spec.batch,
        run_page=partial(_handle_page, spec),
        paused=lambda: ledger.state() == "paused",
        pacer=Pacer(spec.rate),
        malformed=lambda out: BackfillSourceInvalid(
            f"a page checkpoint of backfill {spec.name!r} is malformed: {out!r}",
            meta={"backfill": spec.name},
        ),
        atomic=spec.atomic,
    )
    if paused:
        return {"backfill": spec.name, "paused": True, "rows": end.rows}
    ctx.step.run("finish", ledger.finish, atomic=True)
    return {"backfill": spec.name, "rows": end.rows, "pages": end.page}


def _expected_total(spec: BackfillSpec, row: Any) -> int:
    if spec.count is not None or row.cursor is None:
        return spec.total()
    # Resumed without a count(): the rows done plus those past the cursor.
    return expected_total(_queryset(spec), row.cursor, row.rows_done)


def _handle_page(spec: BackfillSpec, at: Position) -> dict[str, Any]:
    batch = list(page_after(_queryset(spec), at.cursor, spec.batch))
    if not batch:
        return {"cursor": at.cursor, "rows": 0}
    spec.handle(batch)
    last = _cursor_value(spec, batch[-1].pk)
    spec.ledger().page_done(cursor=last, rows=at.rows + len(batch), pages=at.page + 1)
    return {"cursor": last, "rows": len(batch)}


def _queryset(spec: BackfillSpec) -> QuerySet[Any]:
    """``source()``, refused (terminally) unless a pass can walk it in pages."""
    queryset = spec.source()
    if not isinstance(queryset, QuerySet):
        raise BackfillSourceInvalid(
            f"source() of backfill {spec.name!r} answered a "
            f"{type(queryset).__name__}, not a QuerySet",
            meta={"backfill": spec.name},
        )
    problem = paging_problem(queryset)
    if problem is not None:
        raise BackfillSourceInvalid(
            f"source() of backfill {spec.name!r} answered {problem}",
            fix="make source= answer Model.objects.filter(...): no slice, "
            ".values() or union, on a model with a simple primary key",
            meta={"backfill": spec.name},
        )
    return queryset


def _cursor_value(spec: BackfillSpec, pk: Any) -> int | str:
    value = cursor_value(pk)
    if value is None:
        raise BackfillSourceInvalid(
            f"backfill {spec.name!r} walks a model whose primary key is a "
            f"{type(pk).__name__}: keyset pages need a number, a string or a UUID",
            meta={"backfill": spec.name},
        )
    return value
