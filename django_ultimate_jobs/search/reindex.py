"""``reindex(...)``: rebuild a search index in resumable keyset pages.

A reindex is a job (``ultimate_jobs.reindex.<name>``, keyed by its name:
one live pass per index) whose pass has two phases, each a walk of keyset
pages, one durable step a page (:mod:`django_ultimate_jobs.keyset`):

1. ``rows``: every row the source answers gets its document written
   (``index.upsert``), built from the declared fields;
2. ``sweep``: every document the index lists whose row the source no
   longer answers (deleted while the index was not kept, filtered out)
   is removed. So the source is what the index should hold.

With :class:`~.postgres.PostgresSearchIndex` a page's documents, its step
record and its progress commit in one transaction: each page is written
exactly once, a worker killed mid-pass is followed by one that goes on
with the first page not done. Another engine is written at least once per
page (its writes cannot join the transaction), which an upsert by id makes
harmless. A done reindex enqueued again starts over; a failed one goes on
after its cursor; a paused one waits for a resume.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, QuerySet

from ..keyset.declarations import (
    Declarations,
    Problems,
    pass_job,
    refused,
)
from ..keyset.errors import PASS_REFUSALS, PassSourceInvalid
from ..keyset.ledger import Ledger
from ..keyset.pages import checked_source, cursor_value, expected_total, page_after
from ..keyset.target import field_at, model_label, resolve_model
from ..keyset.walk import Pacer, Position, walk
from ..maintenance.builtin import housekeeping_queue
from ..retry import Retry
from ..validation import MAX_NAME_LENGTH as job_name_limit
from .errors import ReindexDeclarationInvalid, ReindexUnknown
from .port import WEIGHTS, Document, SearchIndex
from .query import hits_queryset, search_problem

if TYPE_CHECKING:
    from ..context import JobContext
    from ..drivers.base import Enqueued
    from ..jobs import JobHandle

__all__ = [
    "REINDEX_JOB_PREFIX",
    "ReindexHandle",
    "ReindexPlan",
    "enqueue_reindex",
    "get_reindex",
    "pause_reindex",
    "registered_reindexes",
    "reindex",
    "resume_reindex",
    "search",
    "unregister_reindex",
]

REINDEX_JOB_PREFIX = "ultimate_jobs.reindex."
DEFAULT_BATCH = 500
DEFAULT_RATE = 20.0
MAX_NAME_LENGTH = job_name_limit - len(REINDEX_JOB_PREFIX)
"""The longest reindex name: its job name adds the prefix (178 characters)."""
DEFAULT_HITS = 1000
"""Matches an engine without ``supports_queryset`` answers to ``search()``."""
_VERSION_TYPES = (models.IntegerField, models.DateTimeField, models.DateField)

_reindexes: Declarations[ReindexHandle] = Declarations(
    "reindex", lambda cause, **more: ReindexUnknown(cause, **more)
)


class ReindexHandle:
    """A declared reindex: run it, query its index. Built by :func:`reindex`."""

    def __init__(
        self,
        *,
        name: str,
        model: Any,
        index: SearchIndex,
        fields: Mapping[str, str],
        source: Callable[[], QuerySet[Any]] | None,
        document: Callable[[Any], Mapping[str, Any]] | None,
        version: str | None,
        batch: int,
        rate: float,
        origin: str,
    ) -> None:
        self.name = name
        self.model_ref = model
        self.index = index
        self.weights = dict(fields)
        self.source = source
        self.document = document
        self.version = version
        self.batch = batch
        self.rate = rate
        self.origin = origin
        self.job: JobHandle[Any] = None  # type: ignore[assignment]
        self._model: type[models.Model] | None = None

    def __repr__(self) -> str:
        return f"<ReindexHandle {self.name} {model_label(self.model_ref)}>"

    # -- the declaration, resolved ---------------------------------------------------

    @property
    def model(self) -> type[models.Model]:
        """The declared model (resolved on first use).

        Raises:
            ReindexDeclarationInvalid: the model or a field is unknown.
        """
        if self._model is None:
            model = resolve_model(self.model_ref)
            problems = (
                [model] if isinstance(model, str) else _field_problems(self, model)
            )
            if problems:
                raise refused(_refusal, "reindex", self.name, problems)
            assert not isinstance(model, str)
            self._model = model
        return self._model

    def queryset(self) -> QuerySet[Any]:
        """``source()`` (or every row of the model), refused unless pageable.

        Raises:
            PassSourceInvalid: not a QuerySet of the model, or not pageable.
        """
        model = self.model
        queryset = self.source() if self.source else model._default_manager.all()
        return checked_source(queryset, model, "reindex", self.name)

    def documents(self, rows: Iterable[Any]) -> list[Document]:
        """The documents of ``rows`` (model instances)."""
        docs = []
        for row in rows:
            if self.document is not None:
                given = self.document(row)
                fields = {name: _text(given.get(name)) for name in self.weights}
            else:
                fields = {name: _text(getattr(row, name)) for name in self.weights}
            version = None
            if self.version is not None:
                version = _version_number(getattr(row, self.version))
            docs.append(
                Document(
                    id=str(row.pk), fields=fields, weights=self.weights, version=version
                )
            )
        return docs

    def ledger(self) -> Ledger:
        """Its progress row, the ``Reindex`` of its name."""
        from ..models import Reindex

        return Ledger(
            kind="reindex",
            model=Reindex,
            lookup={"name": self.name},
            label=f"reindex {self.name!r}",
            meta={"reindex": self.name},
            refusals=PASS_REFUSALS,
            done_restarts=True,
        )

    # -- the verbs ---------------------------------------------------------------------

    def enqueue(self, *, restart: bool = False) -> Enqueued:
        """Queue a pass (a worker runs it); see :func:`enqueue_reindex`."""
        self.queryset()  # what the pass would refuse, the enqueue refuses
        return self.ledger().enqueue(
            lambda: self.job.enqueue(restart=restart), force=restart
        )

    def pause(self) -> None:
        """Pause the pass before its next page (``X_PASS_STATE_INVALID`` if
        done or paused)."""
        self.ledger().pause()

    def resume(self) -> Enqueued:
        """Queue a run that goes on after the last page done
        (``X_PASS_STATE_INVALID`` unless paused)."""
        return self.ledger().resume(lambda _row: self.job.enqueue(restart=False))

    def plan(self) -> ReindexPlan:
        """What a pass would do (rows, pages, least time), writing nothing."""
        rows = self.queryset().count()
        pages = math.ceil(rows / self.batch)
        return ReindexPlan(
            name=self.name,
            state=self.ledger().state(),
            rows=rows,
            pages=pages,
            seconds=max(0, pages - 1) / self.rate,
        )

    def sync(self, pks: Iterable[Any]) -> None:
        """Bring the documents of ``pks`` up to date now.

        Rows the source answers are indexed, the others removed: call it
        after saving or deleting rows (in the same transaction, with the
        PostgreSQL engine, so the document commits with the row).
        """
        pk = self.model._meta.pk
        assert pk is not None
        keys = {str(pk.to_python(value)) for value in pks}
        rows = list(self.queryset().filter(pk__in=keys))
        self.index.upsert(self.name, self.documents(rows))
        found = {str(row.pk) for row in rows}
        self.index.remove(self.name, sorted(keys - found))

    def search(
        self, query: str, *, queryset: QuerySet[Any] | None = None
    ) -> QuerySet[Any]:
        """The rows matching ``query``, best first, annotated ``search_rank``.

        ``queryset`` (default: every row of the model) narrows it: a
        tenant's rows, say. The answer is a lazy QuerySet: slice it, page
        it, filter it further. An empty query matches nothing.

        Raises:
            SearchQueryInvalid: ``query`` is not a string the index can run.
        """
        problem = search_problem(query, DEFAULT_HITS)
        if problem is not None:
            from .errors import SearchQueryInvalid

            raise SearchQueryInvalid(problem, meta={"reindex": self.name})
        base = queryset if queryset is not None else self.model._default_manager.all()
        if not query.strip():
            return base.none()
        if self.index.supports_queryset:
            return self.index.filter_queryset(self.name, base, query)
        hits = self.index.search(self.name, query, limit=DEFAULT_HITS)
        return hits_queryset(base, hits)

    def search_ids(self, query: str, *, limit: int = 20) -> list[Any]:
        """The primary keys of the best ``limit`` matches, best first.

        Raises:
            SearchQueryInvalid: as :meth:`search`, or a limit not from 1
                to 10,000.
        """
        problem = search_problem(query, limit)
        if problem is not None:
            from .errors import SearchQueryInvalid

            raise SearchQueryInvalid(problem, meta={"reindex": self.name})
        if not query.strip():
            return []
        pk = self.model._meta.pk
        assert pk is not None
        hits = self.index.search(self.name, query, limit=limit)
        return [pk.to_python(hit.id) for hit in hits]

    # -- the pass ------------------------------------------------------------------------

    def run(self, ctx: JobContext, restart: bool) -> dict[str, Any]:
        """The job body: the rows phase, then the sweep."""
        ledger = self.ledger()
        with ledger.failures():
            start = ctx.step.run(
                "start",
                ledger.begin,
                str(ctx.run_id),
                restart,
                total=self._expected_total,
                more=lambda row: {"phase": row.phase, "removed": row.removed},
                atomic=True,
            )
            if start["skip"]:
                return {"reindex": self.name, "skipped": start["skip"]}
            at = Position(start["cursor"], start["page"], start["rows"])
            total = start["total"] or 0
            walking = partial(
                walk,
                ctx,
                batch=self.batch,
                paused=lambda: ledger.state() == "paused",
                pacer=Pacer(self.rate),
                malformed=lambda out: PassSourceInvalid(
                    f"a page checkpoint of reindex {self.name!r} is malformed: "
                    f"{out!r:.200}",
                    meta={"reindex": self.name},
                ),
            )
            rows = at.rows
            if start["phase"] == "rows":
                end, paused = walking(
                    start=at,
                    run_page=self._index_page,
                    on_page=lambda at: ctx.progress(at.rows, total),
                )
                if paused:
                    return {"reindex": self.name, "paused": True, "rows": end.rows}
                ctx.step.run("sweep", self._begin_sweep, atomic=True)
                rows, at = end.rows, Position(None, end.page, 0)
            end, paused = walking(
                start=at,
                run_page=self._sweep_page,
                step_prefix="sweep-",
                on_page=lambda at: ctx.progress(
                    total, total, note=f"sweep: {at.rows:,} documents checked"
                ),
            )
            if paused:
                return {"reindex": self.name, "paused": True, "rows": rows}
            ctx.step.run("finish", ledger.finish, atomic=True)
            return {"reindex": self.name, "rows": rows, "pages": end.page}

    def _expected_total(self, row: Any) -> int:
        if row.phase == "sweep":
            return int(row.rows_done)
        return expected_total(self.queryset(), row.cursor, row.rows_done)

    def _index_page(self, at: Position) -> dict[str, Any]:
        rows = list(page_after(self.queryset(), at.cursor, self.batch))
        if not rows:
            return {"cursor": at.cursor, "rows": 0}
        self.index.upsert(self.name, self.documents(rows))
        last = cursor_value(rows[-1].pk)
        self.ledger().page_done(
            cursor=last, rows=at.rows + len(rows), pages=at.page + 1
        )
        return {"cursor": last, "rows": len(rows)}

    def _begin_sweep(self) -> None:
        self.ledger().rows().update(phase="sweep", cursor=None)

    def _sweep_page(self, at: Position) -> dict[str, Any]:
        ids = self.index.listed(self.name, after=at.cursor, limit=self.batch)
        if not ids:
            return {"cursor": at.cursor, "rows": 0}
        kept = self._present(ids)
        gone = [id_ for id_ in ids if id_ not in kept]
        self.index.remove(self.name, gone)
        self.ledger().page_done(
            cursor=ids[-1],
            rows=None,
            pages=at.page + 1,
            removed=F("removed") + len(gone),
        )
        return {"cursor": ids[-1], "rows": len(ids), "removed": len(gone)}

    def _present(self, ids: Sequence[str]) -> set[str]:
        """The ids among ``ids`` whose rows the source answers."""
        pk = self.model._meta.pk
        assert pk is not None
        keys = []
        for id_ in ids:
            try:
                keys.append(pk.to_python(id_))
            except (ValidationError, ValueError, TypeError):
                continue  # no row can have it: its document goes
        found = self.queryset().filter(pk__in=keys).values_list("pk", flat=True)
        return {str(key) for key in found}


@dataclass(frozen=True, slots=True)
class ReindexPlan:
    """What a dry run reports."""

    name: str
    state: str
    rows: int
    pages: int
    seconds: float


def reindex(
    *,
    name: str,
    model: type[models.Model] | str,
    index: SearchIndex,
    fields: Sequence[str] | Mapping[str, str],
    source: Callable[[], QuerySet[Any]] | None = None,
    document: Callable[[Any], Mapping[str, Any]] | None = None,
    version: str | None = None,
    batch: int = DEFAULT_BATCH,
    rate: float = DEFAULT_RATE,
    queue: str | Callable[[], str] = housekeeping_queue,
    retry: Retry | None = None,
    timeout: str | int | None = None,
) -> ReindexHandle:
    """Declare a search index over ``model`` and the job that rebuilds it.

    Args:
        name: the durable name: the index's, the ``Reindex`` row's, the job's
            key (``ultimate_jobs.reindex.<name>``).
        model: the indexed model, or ``"app_label.Model"``.
        index: the engine (a :class:`~.port.SearchIndex`), such as
            ``PostgresSearchIndex(config="english")``.
        fields: the fields whose text is indexed, or ``{field: weight}``
            with weights ``"A"`` (ranks highest) to ``"D"`` (the default).
        source: answers the QuerySet of the rows the index holds (default:
            every row). Asked at every page, so it stays lazy.
        document: ``row -> {field: text}``, for text that is not a field's
            (related rows, computed values); its keys are ``fields``.
        version: a field (an integer, a date or a datetime, such as
            ``updated_at``) that grows with every change of a row: the index
            then never replaces a document with an older one.
        batch: rows per page.
        rate: pages per second (``1/86400`` to ``1000``).
        queue, retry, timeout: as for ``@job`` (default: the housekeeping
            queue, 10 attempts).

    Raises:
        ReindexDeclarationInvalid: an argument is refused, or the model or
            a field is unknown (nothing registered).
        JobDuplicate: another declaration holds the name.
    """
    weights = _check(name, model, index, fields, source, document, version, batch, rate)
    # Where it is declared: the same module again (a reload) replaces it.
    origin = f"{sys._getframe(1).f_globals.get('__name__', '?')}:{name}"
    _reindexes.check_free(name, origin)
    handle = ReindexHandle(
        name=name,
        model=model,
        index=index,
        fields=weights,
        source=source,
        document=document,
        version=version,
        batch=batch,
        rate=float(rate),
        origin=origin,
    )
    from django.apps import apps

    if apps.models_ready:
        handle.model  # an unknown model or field is refused now  # noqa: B018

    def run_pass(ctx: JobContext, *, restart: bool = False) -> dict[str, Any]:
        return handle.run(ctx, restart)

    handle.job = pass_job(
        run_pass,
        kind="reindex",
        name=name,
        prefix=REINDEX_JOB_PREFIX,
        key=lambda _input: name,
        queue=queue,
        retry=retry,
        timeout=timeout,
    )
    _reindexes.add(handle)
    return handle


def _check(
    name: Any,
    model: Any,
    index: Any,
    fields: Any,
    source: Any,
    document: Any,
    version: Any,
    batch: Any,
    rate: Any,
) -> dict[str, str]:
    problems = Problems()
    problems.name(name, MAX_NAME_LENGTH)
    problems.model(model)
    if not isinstance(index, SearchIndex):
        problems.append(
            "index must be a search index (PostgresSearchIndex(), or a class "
            f"implementing SearchIndex), got {type(index).__name__}"
        )
    elif (engine := index.check()) is not None:
        problems.append(engine)
    weights: dict[str, str] = {}
    if isinstance(fields, Mapping):
        weights = dict(fields)
    elif isinstance(fields, list | tuple):
        weights = dict.fromkeys(fields, "D")
    if not weights or not all(isinstance(f, str) and f for f in weights):
        problems.append(
            "fields must name at least one field (a list, or {field: weight})"
        )
    bad = sorted(str(w) for w in weights.values() if w not in WEIGHTS)
    if bad:
        problems.append(f"field weights must be A, B, C or D, got {', '.join(bad)}")
    for option, value in (("source", source), ("document", document)):
        if value is not None and not callable(value):
            problems.append(f"{option} must be a callable or None")
    if version is not None and not isinstance(version, str):
        problems.append("version must name a field, or be None")
    problems.whole("batch", batch)
    problems.rate(rate)
    problems.raise_if_any(_refusal, "reindex", name)
    return weights


def _field_problems(handle: ReindexHandle, model: type[models.Model]) -> list[str]:
    problems = []
    if handle.document is None:
        for name in handle.weights:
            found = field_at(model, name)
            if isinstance(found, str):
                problems.append(found)
            elif "__" in name or found.is_relation:
                problems.append(
                    f"field {name!r} is a relation: index its text with document="
                )
    if handle.version is not None:
        found = field_at(model, handle.version)
        if isinstance(found, str):
            problems.append(f"version: {found}")
        elif not isinstance(found, _VERSION_TYPES) or "__" in handle.version:
            problems.append(
                f"version {handle.version!r} must be an integer, date or datetime "
                f"field of {model._meta.label}"
            )
    return problems


def _refusal(cause: str, **more: Any) -> ReindexDeclarationInvalid:
    return ReindexDeclarationInvalid(cause, **more)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _version_number(value: Any) -> int | None:
    """A version as a number: microseconds since the epoch for a datetime."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return round(value.timestamp() * 1_000_000)
    if isinstance(value, date):
        return value.toordinal()
    return int(value)


# -- by name ------------------------------------------------------------------------


registered_reindexes = _reindexes.all
"""Every declared reindex, by name."""
get_reindex = _reindexes.get
"""The reindex declared under a name (``X_REINDEX_UNKNOWN`` if none is)."""
unregister_reindex = _reindexes.forget
"""Forget a reindex and its job (tests declare them on the fly)."""


def enqueue_reindex(name: str, *, restart: bool = False) -> Enqueued:
    """Queue the pass of ``name`` (a worker runs it).

    In the enqueue's transaction the ``Reindex`` row becomes the new
    pass's. A done reindex starts over; a failed one goes on after its
    cursor unless ``restart``; a live one is not queued twice (the answer
    is that pass, ``deduped``).

    Raises:
        ReindexUnknown: not declared.
        PassSourceInvalid: its source cannot be paged.
        PassPaused: it is paused and ``restart`` is not set.
    """
    return get_reindex(name).enqueue(restart=restart)


def pause_reindex(name: str) -> None:
    """Pause ``name`` (see :meth:`ReindexHandle.pause`)."""
    get_reindex(name).pause()


def resume_reindex(name: str) -> Enqueued:
    """Resume ``name`` (see :meth:`ReindexHandle.resume`)."""
    return get_reindex(name).resume()


def search(
    name: str, query: str, *, queryset: QuerySet[Any] | None = None
) -> QuerySet[Any]:
    """The rows of reindex ``name`` matching ``query`` (see :meth:`ReindexHandle.search`)."""
    return get_reindex(name).search(query, queryset=queryset)
