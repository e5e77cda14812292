"""``import_rows(...)``: load an export's parts into a model, once.

An import is a job (``ultimate_jobs.import.<name>``, keyed by the prefix:
one live pass per artifact). Its pass reads ``<prefix>/manifest.json``
(:mod:`.manifest`) and checks it fits the model (every column a field of
the same type, the key among them); then it **verifies** every part (one
durable step each: present, its byte size and SHA-256 the manifest's, every
line a row of its columns, every loaded cell a value its field's column
takes (:mod:`.cells`), as many rows as listed) before it **loads** any
(one durable step a part, its rows upserted on the key in the step's
transaction). So a manifest that does not match its parts loads nothing; a
part loaded is recorded with its step, and an attempt after a crash goes on
with the next. Loading is an upsert on ``key``: a re-run loads nothing
twice (each row is written again, with the same values).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core.files.storage import Storage
from django.core.management.color import no_style
from django.db import DataError, IntegrityError, connections, models, router

from ..errors import JobsError
from ..keyset.declarations import (
    Declarations,
    Problems,
    pass_job,
    refused,
)
from ..keyset.errors import PassSourceInvalid
from ..keyset.ledger import Ledger
from ..keyset.target import model_label, resolve_model
from ..keyset.walk import Pacer, Position, walk
from ..maintenance.builtin import housekeeping_queue
from ..retry import Retry
from ..validation import MAX_NAME_LENGTH as job_name_limit
from .artifact import ArtifactHandle
from .cells import cell_checks
from .columns import field_type
from .errors import (
    ImportDeclarationInvalid,
    ImportManifestInvalid,
    ImportRequestInvalid,
    ImportRowInvalid,
    ImportUnknown,
)
from .formats import CellRefused, decode_part
from .manifest import Manifest, read_manifest, read_part
from .storage import (
    StorageRef,
    prefix_problem,
    storage_label,
    storage_problem,
)

if TYPE_CHECKING:
    from ..context import JobContext
    from ..drivers.base import Enqueued
    from ..keyset.models import PassRecord

__all__ = [
    "IMPORT_JOB_PREFIX",
    "ImportHandle",
    "ImportPlan",
    "get_import",
    "import_rows",
    "registered_imports",
]

IMPORT_JOB_PREFIX = "ultimate_jobs.import."
DEFAULT_BATCH = 1000
MAX_NAME_LENGTH = job_name_limit - len(IMPORT_JOB_PREFIX)
"""The longest import name: its job name adds the prefix (179 characters)."""

_imports: Declarations[ImportHandle] = Declarations(
    "import", lambda cause, **more: ImportUnknown(cause, **more)
)

Mapping_ = list[tuple[int, "models.Field[Any, Any]"]]
"""(manifest column index, model field) of each loaded column."""


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What a dry run reports: the manifest checked against every part."""

    name: str
    prefix: str
    state: str
    rows: int
    parts: int
    format: str
    storage: str


class ImportHandle(ArtifactHandle):
    """A declared import: load an artifact from a prefix. Built by :func:`import_rows`."""

    kind = "import"
    preposition = "from"

    def __init__(
        self,
        *,
        name: str,
        model: Any,
        storage: StorageRef,
        key: str | None,
        fields: Sequence[str] | None,
        batch: int,
        rate: float | None,
        origin: str,
    ) -> None:
        super().__init__(name=name, model=model, storage=storage, origin=origin)
        self.key_name = key
        self.fields = tuple(fields) if fields is not None else None
        self.batch = batch
        self.rate = rate
        self._resolved: tuple[type[models.Model], models.Field[Any, Any]] | None = None

    def __repr__(self) -> str:
        return f"<ImportHandle {self.name} {model_label(self.model_ref)}>"

    # -- the declaration, resolved ---------------------------------------------------

    @property
    def key(self) -> models.Field[Any, Any]:
        """The unique field rows are matched on."""
        return self._resolve()[1]

    def _resolve(self) -> tuple[type[models.Model], models.Field[Any, Any]]:
        if self._resolved is None:
            model = resolve_model(self.model_ref)
            if isinstance(model, str):
                raise refused(_refusal, "import", self.name, [model])
            key = _key_field(model, self.key_name)
            if isinstance(key, str):
                raise refused(_refusal, "import", self.name, [key])
            unknown = [
                f"field {f!r}: {model._meta.label} has no such field"
                for f in self.fields or ()
                if not _concrete(model, f)
            ]
            if unknown:
                raise refused(_refusal, "import", self.name, unknown)
            self._resolved = (model, key)
        return self._resolved

    def record_model(self) -> type[PassRecord]:
        """``Import``."""
        from ..models import Import

        return Import

    def declaration_refusal(self, cause: str, **more: Any) -> JobsError:
        """``X_IMPORT_DECLARATION_INVALID``."""
        return _refusal(cause, **more)

    def mapping(self, manifest: Manifest, *, what: str) -> Mapping_:
        """Which manifest column loads into which field.

        Raises:
            ImportManifestInvalid: a column is no field of the model, or of
                another type; the key is not among the columns.
        """
        model = self.model
        names = [c.name for c in manifest.columns]
        wanted = self.fields if self.fields is not None else tuple(names)
        problems, mapping = [], []
        for name in wanted:
            if name not in names:
                problems.append(f"it has no column {name!r}")
                continue
            column = manifest.columns[names.index(name)]
            field = _concrete(model, name)
            if field is None:
                problems.append(
                    f"its column {name!r} is no field of {model._meta.label}"
                )
            elif field_type(field) != column.type:
                problems.append(
                    f"its column {name!r} is {column.type}, the field "
                    f"{model._meta.label}.{name} is {field_type(field) or 'of no export type'}"
                )
            else:
                mapping.append((names.index(name), field))
        if not problems and self.key not in [f for _, f in mapping]:
            problems.append(f"it has no column for the key {self.key.name!r}")
        if problems:
            raise ImportManifestInvalid(
                f"{what}: the manifest does not fit {model._meta.label}: "
                + "; ".join(problems),
                meta={"problem": "schema", "problems": problems},
            )
        return mapping

    # -- the verbs ---------------------------------------------------------------------

    def check_request(self, prefix: Any) -> None:
        """Refuse a prefix or a declaration the pass could not use.

        Raises:
            ImportRequestInvalid: a bad prefix.
            ImportDeclarationInvalid: an unknown model, key or storage.
        """
        problem = prefix_problem(prefix)
        if problem is not None:
            raise ImportRequestInvalid(
                f"import {self.name!r}: {problem}", meta={"import": self.name}
            )
        self._resolve()
        self.open_storage()

    def enqueue(self, *, prefix: str, force: bool = False) -> Enqueued:
        """Queue a pass that loads the artifact at ``prefix`` (a worker runs it).

        A failed import goes on after its last part loaded; a done one is
        refused without ``force`` (which loads it again: an upsert, so
        nothing twice).

        Raises:
            ImportRequestInvalid, ImportDeclarationInvalid: see :meth:`check_request`.
            PassApplied: it is done and ``force`` is not set.
            PassPaused: it is paused and ``force`` is not set.
        """
        self.check_request(prefix)
        return self.ledger(prefix).enqueue(
            lambda: self.job.enqueue(prefix=prefix, force=force), force=force
        )

    def plan(self, prefix: str) -> ImportPlan:
        """Check the manifest against the model and every part; load nothing.

        Raises:
            ImportManifestInvalid, ImportRowInvalid: what the pass would
                refuse.
        """
        self.check_request(prefix)
        storage = self.open_storage()
        what = self.what(prefix)
        manifest = read_manifest(storage, prefix, what=what)
        mapping = self.mapping(manifest, what=what)
        for index in range(len(manifest.parts)):
            self._rows(storage, prefix, manifest, mapping, index, what=what)
        return ImportPlan(
            name=self.name,
            prefix=prefix,
            state=self.ledger(prefix).state(),
            rows=manifest.rows,
            parts=len(manifest.parts),
            format=manifest.format,
            storage=storage_label(self.storage),
        )

    # -- the pass ------------------------------------------------------------------------

    def run(self, ctx: JobContext, prefix: str, force: bool) -> dict[str, Any]:
        """The job body: the manifest, every part verified, then loaded."""
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
                force,
                atomic=True,
            )
            if start["skip"]:
                return {"import": self.name, "prefix": prefix, "skipped": start["skip"]}
            reading = partial(self._manifest, storage, prefix, start["digest"], what)
            walking = partial(
                walk,
                ctx,
                batch=1,  # a page is a part
                paused=lambda: ledger.state() == "paused",
                malformed=lambda out: PassSourceInvalid(
                    f"a part checkpoint of {what} is malformed: {out!r:.200}",
                    meta={"import": self.name, "prefix": prefix},
                ),
            )
            _, paused = walking(
                start=Position(None, 0, 0),
                run_page=partial(self._verify, storage, prefix, reading, what),
                pacer=Pacer(None),
                step_prefix="verify-",
                atomic=False,
                on_page=lambda at: ctx.progress(
                    0, start["parts"], note=f"{at.page} parts verified"
                ),
            )
            if not paused:
                _, paused = walking(
                    start=Position(start["cursor"], start["page"], start["page"]),
                    run_page=partial(
                        self._load, storage, ledger, prefix, reading, what
                    ),
                    pacer=Pacer(self.rate),
                    step_prefix="load-",
                    on_page=lambda at: ctx.progress(
                        at.page, start["parts"], note="parts loaded"
                    ),
                )
            if paused:
                return {"import": self.name, "prefix": prefix, "paused": True}
            ctx.step.run("finish", self._finish, ledger, atomic=True)
            return {"import": self.name, "prefix": prefix, "rows": start["total"]}

    def _begin(
        self, ledger: Ledger, storage: Storage, run_id: str, prefix: str, force: bool
    ) -> dict[str, Any]:
        what = self.what(prefix)
        manifest = read_manifest(storage, prefix, what=what)
        self.mapping(manifest, what=what)
        return ledger.begin(
            run_id,
            force,
            total=lambda _row: manifest.rows,
            more=lambda _row: {"digest": manifest.digest, "parts": len(manifest.parts)},
        )

    def _manifest(
        self, storage: Storage, prefix: str, digest: str, what: str
    ) -> tuple[Manifest, Mapping_]:
        manifest = read_manifest(storage, prefix, what=what)
        if manifest.digest != digest:
            raise ImportManifestInvalid(
                f"{what}: the manifest changed while the import ran",
                meta={"problem": "changed"},
            )
        return manifest, self.mapping(manifest, what=what)

    def _rows(
        self,
        storage: Storage,
        prefix: str,
        manifest: Manifest,
        mapping: Mapping_,
        index: int,
        *,
        what: str,
    ) -> list[list[Any]]:
        """Part ``index``'s rows, checked against the manifest and every
        loaded cell against its field (:mod:`.cells`)."""
        part = manifest.parts[index]
        data = read_part(storage, prefix, part, what=what)
        try:
            rows = list(
                decode_part(manifest.format, manifest.columns, data, header=index == 0)
            )
        except CellRefused as refused:
            column = (
                f", column {manifest.columns[refused.column].name!r}"
                if refused.column is not None
                else ""
            )
            raise ImportRowInvalid(
                f"{what}: {part.name} line {refused.line}{column}: {refused.reason}",
                meta={"part": part.name, "line": refused.line},
            ) from None
        if len(rows) != part.rows:
            raise ImportManifestInvalid(
                f"{what}: the part {part.name!r} holds {len(rows)} rows, the "
                f"manifest says {part.rows}",
                meta={"problem": "count"},
            )
        self._check_cells(rows, manifest, mapping, index, what=what)
        return rows

    def _check_cells(
        self,
        rows: list[list[Any]],
        manifest: Manifest,
        mapping: Mapping_,
        index: int,
        *,
        what: str,
    ) -> None:
        """Every loaded cell one its field takes, each key once in the part
        (one upsert statement cannot update a row twice)."""
        checks = cell_checks(self.model, manifest.columns, mapping)
        (key,) = [n for n, field in mapping if field is self.key]
        keys: set[Any] = set()
        # A CSV part 0 starts with its header: lines count as decode's do.
        first = 2 if manifest.format == "csv" and index == 0 else 1
        for number, row in enumerate(rows):
            reasons = ((cell, check(row[cell])) for cell, check in checks)
            refused = next(((c, r) for c, r in reasons if r is not None), None)
            if refused is None and row[key] in keys:
                refused = (key, "the key repeats an earlier row of the part")
            keys.add(row[key])
            if refused is not None:
                line = first + number
                name = manifest.columns[refused[0]].name
                raise ImportRowInvalid(
                    f"{what}: {manifest.parts[index].name} line {line} (row "
                    f"{number + 1}), column {name!r}: {refused[1]}",
                    meta={
                        "part": manifest.parts[index].name,
                        "line": line,
                        "row": number + 1,
                        "column": name,
                    },
                )

    def _verify(
        self,
        storage: Storage,
        prefix: str,
        reading: Callable[[], tuple[Manifest, Mapping_]],
        what: str,
        at: Position,
    ) -> dict[str, Any]:
        manifest, mapping = reading()
        if at.page >= len(manifest.parts):
            return {"cursor": at.cursor, "rows": 0}
        self._rows(storage, prefix, manifest, mapping, at.page, what=what)
        return {"cursor": at.page, "rows": 1}

    def _load(
        self,
        storage: Storage,
        ledger: Ledger,
        prefix: str,
        reading: Callable[[], tuple[Manifest, Mapping_]],
        what: str,
        at: Position,
    ) -> dict[str, Any]:
        manifest, mapping = reading()
        if at.page >= len(manifest.parts):
            return {"cursor": at.cursor, "rows": 0}
        rows = self._rows(storage, prefix, manifest, mapping, at.page, what=what)
        self._upsert(rows, mapping, what=f"{what}: {manifest.parts[at.page].name}")
        ledger.page_done(
            cursor=at.page,
            rows=sum(p.rows for p in manifest.parts[: at.page + 1]),
            pages=at.page + 1,
        )
        return {"cursor": at.page, "rows": 1, "loaded": len(rows)}

    def _upsert(self, rows: list[list[Any]], mapping: Mapping_, *, what: str) -> None:
        model = self.model
        objects = [
            model(**{field.attname: row[n] for n, field in mapping}) for row in rows
        ]
        others = [field.name for _, field in mapping if field is not self.key]
        manager = model._default_manager
        try:
            # Django's foreign keys are checked at COMMIT (deferred): checked
            # now, a row pointing nowhere is refused here, with its code,
            # not by the step's commit as a bare IntegrityError.
            with connections[router.db_for_write(model)].cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            if others:
                manager.bulk_create(
                    objects,
                    batch_size=self.batch,
                    update_conflicts=True,
                    unique_fields=[self.key.name],
                    update_fields=others,
                )
            else:
                manager.bulk_create(
                    objects, batch_size=self.batch, ignore_conflicts=True
                )
        except (IntegrityError, DataError) as error:
            constraint = getattr(
                getattr(error.__cause__, "diag", None), "constraint_name", None
            )
            raise ImportRowInvalid(
                f"{what}: the database refused its rows ({type(error).__name__}"
                f"{f' on {constraint}' if constraint else ''})",
                meta={"constraint": constraint},
            ) from None  # the database's message holds the values

    def _finish(self, ledger: Ledger) -> None:
        # Rows loaded with their keys leave an identity sequence behind
        # them: the app's next insert would collide with a loaded row.
        connection = connections[router.db_for_write(self.model)]
        statements = connection.ops.sequence_reset_sql(no_style(), [self.model])
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        ledger.finish()


def _concrete(model: type[models.Model], name: str) -> models.Field[Any, Any] | None:
    try:
        field = model._meta.get_field(name)
    except Exception:
        return None
    if not isinstance(field, models.Field) or not field.concrete or field.many_to_many:
        return None
    return field


def _key_field(
    model: type[models.Model], name: str | None
) -> models.Field[Any, Any] | str:
    if name is None:
        pk = model._meta.pk
        assert pk is not None
        return pk
    field = _concrete(model, name)
    if field is None:
        return f"key {name!r}: {model._meta.label} has no such field"
    single = any(
        isinstance(c, models.UniqueConstraint)
        and list(c.fields) == [name]
        and c.condition is None
        for c in model._meta.constraints
    )
    if not (field.primary_key or field.unique or single):
        return (
            f"key {name!r} is not unique in {model._meta.label}: rows could match twice"
        )
    return field


def import_rows(
    *,
    name: str,
    model: type[models.Model] | str,
    storage: StorageRef,
    key: str | None = None,
    fields: Sequence[str] | None = None,
    batch: int = DEFAULT_BATCH,
    rate: float | None = None,
    queue: str | Callable[[], str] = housekeeping_queue,
    retry: Retry | None = None,
    timeout: str | int | None = None,
) -> ImportHandle:
    """Declare an import of exported parts into ``model``.

    Args:
        name: the durable name (the ``Import`` rows', the job's).
        model: the model rows load into, or ``"app_label.Model"``.
        storage: where the parts are: a ``STORAGES`` alias (or a Storage).
        key: the unique field a row is matched on (default: the primary
            key); a row whose key is stored is updated, others inserted.
        fields: the columns to load (default: every column of the manifest,
            each of which must then be a field of the model).
        batch: rows per insert statement.
        rate: parts per second (default: unpaced).
        queue, retry, timeout: as for ``@job`` (default: the housekeeping
            queue, 10 attempts).

    Raises:
        ImportDeclarationInvalid: an argument is refused, or the model, the
            key or a field is unknown (nothing registered).
        JobDuplicate: another declaration holds the name.
    """
    problems = Problems()
    problems.name(name, MAX_NAME_LENGTH)
    problems.model(model)
    problems.extend(filter(None, [storage_problem(storage)]))
    if key is not None and (not isinstance(key, str) or not key):
        problems.append("key must name a field, or be None (the primary key)")
    if fields is not None and (
        isinstance(fields, str)
        or not isinstance(fields, list | tuple)
        or not fields
        or not all(isinstance(f, str) and f for f in fields)
    ):
        problems.append("fields must be a non-empty list of field names, or None")
    problems.whole("batch", batch)
    problems.rate(rate, optional=True)
    problems.raise_if_any(_refusal, "import", name)
    origin = f"{sys._getframe(1).f_globals.get('__name__', '?')}:{name}"
    _imports.check_free(name, origin)
    handle = ImportHandle(
        name=name,
        model=model,
        storage=storage,
        key=key,
        fields=fields,
        batch=batch,
        rate=None if rate is None else float(rate),
        origin=origin,
    )
    from django.apps import apps

    if apps.models_ready:
        handle.key  # an unknown model, key or field is refused now  # noqa: B018

    def run_pass(
        ctx: JobContext, *, prefix: str, force: bool = False
    ) -> dict[str, Any]:
        return handle.run(ctx, prefix, force)

    handle.job = pass_job(
        run_pass,
        kind="import",
        name=name,
        prefix=IMPORT_JOB_PREFIX,
        key=lambda given: str(given.get("prefix")),
        queue=queue,
        retry=retry,
        timeout=timeout,
    )
    _imports.add(handle)
    return handle


def _refusal(cause: str, **more: Any) -> ImportDeclarationInvalid:
    return ImportDeclarationInvalid(cause, **more)


# -- by name ------------------------------------------------------------------------

registered_imports = _imports.all
"""Every declared import, by name."""
get_import = _imports.get
"""The import declared under a name (``X_IMPORT_UNKNOWN`` if none is)."""
unregister_import = _imports.forget
"""Forget an import and its job (tests declare them on the fly)."""
