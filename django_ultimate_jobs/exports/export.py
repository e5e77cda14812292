"""``export_rows(...)``: a model's rows as CSV or NDJSON parts plus a manifest.

An export is a job (``ultimate_jobs.export.<name>``, keyed by the prefix:
one live pass per artifact) whose pass walks the source in keyset pages
(:mod:`django_ultimate_jobs.keyset`), one durable step a page, and writes
each page as one part, ``<prefix>/part-00000.csv``, ``part-00001.csv``...
Its last step writes ``<prefix>/manifest.json`` (:mod:`.manifest`). A part's
name is its page's index, so a page replayed after a crash overwrites its
part: no row is written twice, and the manifest lists each part once with
its rows, bytes and SHA-256. Memory holds one page: the pass never loads
the source, and a part is at most ``max_part_bytes``.

A new pass first removes the manifest a pass before it wrote, so a reader
never pairs an old manifest with new parts; parts left over from a longer
earlier export are removed when the new manifest is written.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core.files.storage import Storage
from django.db import models
from django.db.models import F, QuerySet

from ..errors import JobsError
from ..keyset.declarations import (
    Declarations,
    Problems,
    pass_job,
    refused,
)
from ..keyset.errors import PassSourceInvalid
from ..keyset.ledger import Ledger, db_now
from ..keyset.pages import checked_source, cursor_value, expected_total, page_after
from ..keyset.target import model_label, resolve_model
from ..keyset.walk import Pacer, Position, walk
from ..maintenance.builtin import housekeeping_queue
from ..retry import Retry
from ..validation import MAX_NAME_LENGTH as job_name_limit
from .artifact import ArtifactHandle
from .columns import Column, column_of
from .errors import (
    ExportDeclarationInvalid,
    ExportPartTooLarge,
    ExportRequestInvalid,
    ExportRowInvalid,
    ExportUnknown,
)
from .formats import FORMATS, CellRefused, encode_part
from .manifest import Part, build_manifest
from .storage import (
    MANIFEST,
    StorageRef,
    delete,
    part_file,
    part_name,
    prefix_problem,
    storage_label,
    storage_problem,
    write,
)

if TYPE_CHECKING:
    from ..context import JobContext
    from ..drivers.base import Enqueued
    from ..keyset.models import PassRecord

__all__ = [
    "EXPORT_JOB_PREFIX",
    "ExportHandle",
    "ExportPlan",
    "export_rows",
    "get_export",
    "registered_exports",
]

EXPORT_JOB_PREFIX = "ultimate_jobs.export."
DEFAULT_BATCH = 5000
DEFAULT_MAX_PART_BYTES = 16 * 1024 * 1024
MAX_NAME_LENGTH = job_name_limit - len(EXPORT_JOB_PREFIX)
"""The longest export name: its job name adds the prefix (179 characters)."""

_exports: Declarations[ExportHandle] = Declarations(
    "export", lambda cause, **more: ExportUnknown(cause, **more)
)


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """What a dry run reports."""

    name: str
    prefix: str
    state: str
    rows: int
    parts: int
    storage: str


class ExportHandle(ArtifactHandle):
    """A declared export: run it into a prefix. Built by :func:`export_rows`."""

    kind = "export"
    preposition = "at"

    def __init__(
        self,
        *,
        name: str,
        model: Any,
        fields: Sequence[str],
        format: str,
        storage: StorageRef,
        source: Callable[..., QuerySet[Any]] | None,
        batch: int,
        rate: float | None,
        max_part_bytes: int,
        origin: str,
    ) -> None:
        super().__init__(name=name, model=model, storage=storage, origin=origin)
        self.fields = tuple(fields)
        self.format = format
        self.source = source
        self.batch = batch
        self.rate = rate
        self.max_part_bytes = max_part_bytes
        self._resolved: tuple[type[models.Model], tuple[Column, ...]] | None = None

    def __repr__(self) -> str:
        return f"<ExportHandle {self.name} {model_label(self.model_ref)} {self.format}>"

    # -- the declaration, resolved ---------------------------------------------------

    @property
    def columns(self) -> tuple[Column, ...]:
        """The columns: one per field, in order."""
        return self._resolve()[1]

    def _resolve(self) -> tuple[type[models.Model], tuple[Column, ...]]:
        if self._resolved is None:
            model = resolve_model(self.model_ref)
            if isinstance(model, str):
                raise refused(_refusal, "export", self.name, [model])
            found = [column_of(model, path) for path in self.fields]
            problems = [c for c in found if isinstance(c, str)]
            if problems:
                raise refused(_refusal, "export", self.name, problems)
            columns = tuple(c for c in found if isinstance(c, Column))
            self._resolved = (model, columns)
        return self._resolved

    def record_model(self) -> type[PassRecord]:
        """``Export``."""
        from ..models import Export

        return Export

    def declaration_refusal(self, cause: str, **more: Any) -> JobsError:
        """``X_EXPORT_DECLARATION_INVALID``."""
        return _refusal(cause, **more)

    def run_input(self, row: Any) -> dict[str, Any]:
        """The prefix and the params the paused pass was asked with."""
        return {"prefix": row.prefix, "params": row.params, "force": False}

    def ledger(self, prefix: str, **defaults: Any) -> Ledger:
        """The ``Export`` row of ``prefix`` (created with the format)."""
        return super().ledger(prefix, format=self.format, **defaults)

    def queryset(self, params: Mapping[str, Any]) -> QuerySet[Any]:
        """``source(**params)`` (or every row), refused unless pageable.

        Raises:
            PassSourceInvalid: not a QuerySet of the model, or not pageable.
        """
        model = self.model
        queryset = (
            self.source(**params) if self.source else model._default_manager.all()
        )
        return checked_source(queryset, model, "export", self.name)

    # -- the verbs ---------------------------------------------------------------------

    def check_request(self, prefix: Any, params: Any) -> dict[str, Any]:
        """Refuse what the pass could not do, before anything is written.

        Answers the params as a dict.

        Raises:
            ExportRequestInvalid: a bad prefix, or params the source does
                not take.
            ExportDeclarationInvalid: an unknown model, field or storage.
            PassSourceInvalid: the source cannot be paged.
        """
        problem = prefix_problem(prefix)
        if problem is None and params is not None and not isinstance(params, Mapping):
            problem = f"params must be a dict, got {type(params).__name__}"
        given = dict(params or {})
        if problem is None:
            problem = self._params_problem(given)
        if problem is not None:
            raise ExportRequestInvalid(
                f"export {self.name!r}: {problem}", meta={"export": self.name}
            )
        self.open_storage()
        self.queryset(given)
        return given

    def _params_problem(self, params: dict[str, Any]) -> str | None:
        if self.source is None:
            return "takes no params (it has no source=)" if params else None
        try:
            inspect.signature(self.source).bind(**params)
        except TypeError as error:
            return f"source() does not take these params ({error})"
        except ValueError:
            return None  # a builtin without a signature: let it answer
        return None

    def enqueue(
        self,
        *,
        prefix: str,
        params: Mapping[str, Any] | None = None,
        force: bool = False,
    ) -> Enqueued:
        """Queue a pass that writes the artifact at ``prefix`` (a worker runs it).

        In the enqueue's transaction the ``Export`` row becomes the new
        pass's. A failed export goes on after its last part (with the same
        params); a done one is refused without ``force``, which starts over.

        Raises:
            ExportRequestInvalid, ExportDeclarationInvalid, PassSourceInvalid:
                see :meth:`check_request`; also params other than those of
                an unfinished export at that prefix, without ``force``.
            PassApplied: it is done and ``force`` is not set.
            PassPaused: it is paused and ``force`` is not set.
        """
        given = self.check_request(prefix, params)

        def same_params(row: Any) -> None:
            if not force and row.cursor is not None and row.params != given:
                raise ExportRequestInvalid(
                    f"{self.what(prefix)} holds a partial export "
                    "with other params: going on would mix the two",
                    fix="pass the same params, or --force to start over",
                    meta={"export": self.name, "prefix": prefix},
                )

        return self.ledger(prefix).enqueue(
            lambda: self.job.enqueue(prefix=prefix, params=given, force=force),
            force=force,
            check=same_params,
            update={"params": given, "format": self.format},
        )

    def plan(self, prefix: str, params: Mapping[str, Any] | None = None) -> ExportPlan:
        """What a pass would write (rows, parts), writing nothing."""
        given = self.check_request(prefix, params)
        rows = self.queryset(given).count()
        return ExportPlan(
            name=self.name,
            prefix=prefix,
            state=self.ledger(prefix).state(),
            rows=rows,
            parts=math.ceil(rows / self.batch),
            storage=storage_label(self.storage),
        )

    # -- the pass ------------------------------------------------------------------------

    def run(
        self, ctx: JobContext, prefix: str, params: dict[str, Any], force: bool
    ) -> dict[str, Any]:
        """The job body: the parts, then the manifest."""
        ledger = self.ledger(prefix)
        what = self.what(prefix)
        with ledger.failures():
            storage = self.open_storage()
            start = ctx.step.run(
                "start",
                self._begin,
                ledger,
                storage,
                str(ctx.run_id),
                prefix,
                params,
                force,
                atomic=True,
            )
            if start["skip"]:
                return {"export": self.name, "prefix": prefix, "skipped": start["skip"]}
            end, paused = walk(
                ctx,
                start=Position(start["cursor"], start["page"], start["rows"]),
                batch=self.batch,
                run_page=partial(self._part, storage, start["id"], prefix, params),
                paused=lambda: ledger.state() == "paused",
                pacer=Pacer(self.rate),
                malformed=lambda out: PassSourceInvalid(
                    f"a page checkpoint of {what} is malformed: {out!r:.200}",
                    meta={"export": self.name, "prefix": prefix},
                ),
                step_prefix="part-",
                on_page=lambda at: ctx.progress(at.rows, start["total"] or 0),
            )
            if paused:
                return {"export": self.name, "prefix": prefix, "paused": True}
            ctx.step.run(
                "finish",
                self._finish,
                storage,
                start["id"],
                prefix,
                end.page,
                str(ctx.run_id),
                atomic=True,
            )
            return {
                "export": self.name,
                "prefix": prefix,
                "rows": end.rows,
                "parts": end.page,
            }

    def _begin(
        self,
        ledger: Ledger,
        storage: Storage,
        run_id: str,
        prefix: str,
        params: dict[str, Any],
        force: bool,
    ) -> dict[str, Any]:
        start = ledger.begin(
            run_id,
            force,
            total=lambda row: expected_total(
                self.queryset(params), row.cursor, row.rows_done
            ),
            more=lambda row: {"id": row.pk},
        )
        if not start["skip"]:
            # Before any part changes: no reader pairs an old manifest with
            # new parts.
            delete(storage, f"{prefix}/{MANIFEST}")
        return start

    def _part(
        self,
        storage: Storage,
        export_id: int,
        prefix: str,
        params: dict[str, Any],
        at: Position,
    ) -> dict[str, Any]:
        from ..models import ExportPart

        values = self.queryset(params).values_list("pk", *self.fields)
        rows = list(page_after(values, at.cursor, self.batch))
        if not rows:
            return {"cursor": at.cursor, "rows": 0}
        what = self.what(prefix)
        try:
            data = encode_part(
                self.format,
                self.columns,
                (row[1:] for row in rows),
                header=at.page == 0,
            )
        except CellRefused as refused:
            assert refused.line is not None and refused.column is not None
            raise ExportRowInvalid(
                f"{what}: the row with primary key {rows[refused.line - 1][0]!r:.80}, "
                f"column {self.fields[refused.column]!r}, holds {refused.reason}",
                meta={"export": self.name, "column": self.fields[refused.column]},
            ) from None
        if len(data) > self.max_part_bytes:
            raise ExportPartTooLarge(
                f"{what}: part {at.page} ({len(rows):,} rows) is {len(data):,} bytes, "
                f"over max_part_bytes={self.max_part_bytes:,}",
                meta={"export": self.name, "part": at.page},
            )
        write(storage, part_name(prefix, at.page, self.format), data, what=what)
        ExportPart.objects.update_or_create(
            export_id=export_id,
            index=at.page,
            defaults={
                "rows": len(rows),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            },
        )
        last = cursor_value(rows[-1][0])
        self.ledger(prefix).page_done(
            cursor=last,
            rows=at.rows + len(rows),
            pages=at.page + 1,
            bytes=F("bytes") + len(data),
        )
        return {"cursor": last, "rows": len(rows), "bytes": len(data)}

    def _finish(
        self, storage: Storage, export_id: int, prefix: str, parts: int, run_id: str
    ) -> None:
        from ..models import ExportPart

        written = ExportPart.objects.filter(export_id=export_id)
        for stale in written.filter(index__gte=parts).values_list("index", flat=True):
            delete(storage, part_name(prefix, stale, self.format))
        written.filter(index__gte=parts).delete()
        listed = [
            Part(part_file(p.index, self.format), p.rows, p.bytes, p.sha256)
            for p in written.order_by("index")
        ]
        data = build_manifest(
            export=self.name,
            model=self.model._meta.label_lower,
            run_id=run_id,
            prefix=prefix,
            format=self.format,
            columns=self.columns,
            parts=listed,
            completed_at=db_now().isoformat(),
        )
        what = self.what(prefix)
        write(storage, f"{prefix}/{MANIFEST}", data, what=what)
        self.ledger(prefix).finish(bytes=sum(p.bytes for p in listed))


def export_rows(
    *,
    name: str,
    model: type[models.Model] | str,
    fields: Sequence[str],
    storage: StorageRef,
    format: str = "csv",
    source: Callable[..., QuerySet[Any]] | None = None,
    batch: int = DEFAULT_BATCH,
    rate: float | None = None,
    max_part_bytes: int = DEFAULT_MAX_PART_BYTES,
    queue: str | Callable[[], str] = housekeeping_queue,
    retry: Retry | None = None,
    timeout: str | int | None = None,
) -> ExportHandle:
    """Declare an export of ``model``'s rows and the job that writes it.

    Args:
        name: the durable name (the ``Export`` rows', the job's).
        model: the exported model, or ``"app_label.Model"``.
        fields: the columns, in order: field names, ``customer__email``
            (through a foreign key), a foreign key (its key).
        storage: where parts go: a ``STORAGES`` alias (or a Storage, or a
            callable answering one). Required: the default storage is often
            public media, no place for an export.
        format: ``"csv"`` or ``"ndjson"``.
        source: ``(**params) -> QuerySet`` of the model: which rows (default:
            every row); ``params`` are the enqueue's. Asked at every page.
        batch: rows per page, and so per part.
        rate: parts per second (default: unpaced).
        max_part_bytes: the largest part (``X_EXPORT_PART_TOO_LARGE`` past it).
        queue, retry, timeout: as for ``@job`` (default: the housekeeping
            queue, 10 attempts).

    Raises:
        ExportDeclarationInvalid: an argument is refused, or the model or a
            field is unknown (nothing registered).
        JobDuplicate: another declaration holds the name.
    """
    _check(name, model, fields, storage, format, source, batch, rate, max_part_bytes)
    origin = f"{sys._getframe(1).f_globals.get('__name__', '?')}:{name}"
    _exports.check_free(name, origin)
    handle = ExportHandle(
        name=name,
        model=model,
        fields=fields,
        format=format,
        storage=storage,
        source=source,
        batch=batch,
        rate=None if rate is None else float(rate),
        max_part_bytes=max_part_bytes,
        origin=origin,
    )
    from django.apps import apps

    if apps.models_ready:
        handle.columns  # an unknown model or field is refused now  # noqa: B018

    def run_pass(
        ctx: JobContext,
        *,
        prefix: str,
        params: dict[str, Any] | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        return handle.run(ctx, prefix, dict(params or {}), force)

    handle.job = pass_job(
        run_pass,
        kind="export",
        name=name,
        prefix=EXPORT_JOB_PREFIX,
        key=lambda given: str(given.get("prefix")),
        queue=queue,
        retry=retry,
        timeout=timeout,
    )
    _exports.add(handle)
    return handle


def _check(
    name: Any,
    model: Any,
    fields: Any,
    storage: Any,
    format: Any,
    source: Any,
    batch: Any,
    rate: Any,
    max_part_bytes: Any,
) -> None:
    problems = Problems()
    problems.name(name, MAX_NAME_LENGTH)
    problems.model(model)
    if (
        isinstance(fields, str)
        or not isinstance(fields, list | tuple)
        or not fields
        or not all(isinstance(f, str) and f for f in fields)
    ):
        problems.append("fields must be a non-empty list of field names")
    elif len(set(fields)) != len(fields):
        problems.append("fields names a field twice")
    if format not in FORMATS:
        problems.append(
            f"format must be one of {', '.join(FORMATS)}, got {format!r:.40}"
        )
    problems.extend(filter(None, [storage_problem(storage)]))
    if source is not None and not callable(source):
        problems.append("source must be a callable or None")
    problems.whole("batch", batch)
    problems.whole("max_part_bytes", max_part_bytes)
    problems.rate(rate, optional=True)
    problems.raise_if_any(_refusal, "export", name)


def _refusal(cause: str, **more: Any) -> ExportDeclarationInvalid:
    return ExportDeclarationInvalid(cause, **more)


# -- by name ------------------------------------------------------------------------


registered_exports = _exports.all
"""Every declared export, by name."""
get_export = _exports.get
"""The export declared under a name (``X_EXPORT_UNKNOWN`` if none is)."""
unregister_export = _exports.forget
"""Forget an export and its job (tests declare them on the fly)."""
