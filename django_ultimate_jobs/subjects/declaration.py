"""``subject(...)`` and ``table(...)``: where one person's data lives.

A subject is a name and the tables holding its rows. Each table says how
its rows are found from the subject's key (``by=``, a field path ending at
the column that holds the key) and what an erase does to them (``erase=``:
``anonymize(...)``, ``DELETE`` or ``retain("why")``). Export walks every
table; erase treats them in the order listed.

Declarations are checked where they are made, against the models: an
unknown model, field or ``by=`` path, or a policy its field cannot take, is
refused with a code before anything is registered.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from django.db import models
from django.db.models import QuerySet

from ..errors import JobsError
from ..registry import put_unique
from ..validation import MAX_NAME_LENGTH, name_problem
from .errors import (
    PersonalDataUnerased,
    PersonalDataUnreached,
    SubjectDeclarationInvalid,
    SubjectKeyInvalid,
    SubjectUnknown,
)
from .marks import marked_models, personal_data_fields
from .policies import Anonymize, Retain, Treatment
from .resolve import label_of, local_field, resolve_model, resolve_path

__all__ = [
    "DEFAULT_BATCH",
    "Subject",
    "Table",
    "get_subject",
    "personal_data_problems",
    "registered_subjects",
    "subject",
    "table",
    "unregister_subject",
]

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
DEFAULT_STORAGE = "default"

_lock = threading.Lock()
_subjects: dict[str, Subject] = {}


@dataclass(frozen=True, slots=True)
class Table:
    """One table of a subject: how its rows are found and treated."""

    model: type[models.Model]
    by: str
    erase: Treatment
    export: tuple[str, ...]
    """The fields an export writes (every column by default)."""

    @property
    def label(self) -> str:
        """``app_label.ModelName``."""
        return label_of(self.model)

    def rows(self, key: Any) -> QuerySet[Any]:
        """The subject's rows, through the base manager (none hidden).

        Raises:
            SubjectKeyInvalid: the ``by=`` field cannot take ``key``.
        """
        from django.core.exceptions import ValidationError

        try:
            rows = self.model._base_manager.filter(**{self.by: key})
            self._check_range(key)
        except (ValueError, TypeError, ValidationError, OverflowError) as error:
            raise SubjectKeyInvalid(
                f"the key does not fit by={self.by!r} of the {self.label} "
                f"table ({type(error).__name__})",
                meta={"model": self.label, "by": self.by},
            ) from None
        return rows

    def _check_range(self, key: Any) -> None:
        """Django answers no rows for an integer its column cannot hold
        (2**70 for a bigint): a key no row can have is refused instead.

        Raises:
            OverflowError: the key is outside the column type's range.
        """
        from django.db import connections, router

        field: Any = resolve_path(self.model, self.by)
        while field.is_relation and field.target_field is not None:
            field = field.target_field  # a foreign key holds its target's key
        kind = field.get_internal_type()
        ops = connections[router.db_for_read(self.model)].ops
        if kind not in ops.integer_field_ranges:
            return
        low, high = ops.integer_field_range(kind)
        value = field.get_prep_value(key)
        if not low <= value <= high:
            raise OverflowError(f"outside the range of a {kind}")

    def untreated(self, key: Any) -> QuerySet[Any]:
        """The rows an erase has yet to treat (none for a retained table)."""
        rows = self.rows(key)
        if isinstance(self.erase, Retain):
            return rows.none()
        if isinstance(self.erase, Anonymize):
            done = [
                policy.treated(self.model._meta.get_field(name))  # type: ignore[arg-type]
                for name, policy in self.erase.policies.items()
            ]
            return rows.filter(~reduce(lambda a, b: a & b, done))
        return rows

    def assignments(self) -> dict[str, Any]:
        """``field -> value`` for the ``UPDATE`` of an anonymised page."""
        assert isinstance(self.erase, Anonymize)
        return {
            name: policy.target(self.model._meta.get_field(name))  # type: ignore[arg-type]
            for name, policy in self.erase.policies.items()
        }

    def unerased(self) -> list[str]:
        """Marked fields this table's erase leaves as they are."""
        return [
            name
            for name in personal_data_fields(self.model)
            if not self.erase.covers(name)
        ]


def table(
    model: Any,
    *,
    by: str = "pk",
    erase: Treatment,
    export: Sequence[str] | None = None,
) -> Table:
    """One table of a subject.

    Args:
        model: the model (or its ``"app_label.ModelName"`` label).
        by: the field path from this model to the column holding the
            subject's key: ``"pk"`` for the subject's own row,
            ``"customer"`` for a foreign key to it, ``"order__customer"``
            through another foreign key.
        erase: ``anonymize(field=POLICY, ...)``, ``DELETE`` or
            ``retain("why")``.
        export: the fields an export writes (default: every column). Leave
            secrets out (a password hash is not the person's data).

    Raises:
        SubjectModelUnknown, SubjectFieldUnknown: a name the models lack.
        SubjectDeclarationInvalid: a policy its field cannot take, or
            ``erase`` is not a treatment.
    """
    resolved = resolve_model(model)
    label = label_of(resolved)
    resolve_path(resolved, by)
    if not _keyset_pk(resolved):
        raise SubjectDeclarationInvalid(
            f"the primary key of {label} is a {type(resolved._meta.pk).__name__}: "
            "pages walk the table by primary key, which must be a number, a "
            "string or a UUID",
            meta={"model": label},
        )
    if not isinstance(erase, Treatment):
        raise SubjectDeclarationInvalid(
            f"erase= of the {label} table must be anonymize(...), DELETE or "
            f"retain('why'), not a {type(erase).__name__}",
            meta={"model": label},
        )
    if isinstance(erase, Anonymize):
        problems = []
        for name, policy in erase.policies.items():
            field = local_field(resolved, name)
            problem = (
                "a primary key cannot be anonymised (DELETE the rows)"
                if field.primary_key
                else policy.problem(field)
            )
            if problem is not None:
                problems.append(f"{label}.{name}: {problem}")
        if problems:
            raise SubjectDeclarationInvalid(
                "; ".join(problems), meta={"model": label, "problems": problems}
            )
    if export is None:
        fields = tuple(f.name for f in resolved._meta.local_concrete_fields)
    elif isinstance(export, str) or not isinstance(export, Sequence) or not export:
        raise SubjectDeclarationInvalid(
            f"export= of the {label} table must be a non-empty list of field names",
            meta={"model": label},
        )
    else:
        fields = tuple(local_field(resolved, name).name for name in export)
    return Table(model=resolved, by=by, erase=erase, export=fields)


def _keyset_pk(model: type[models.Model]) -> bool:
    field: Any = model._meta.pk
    while field is not None and field.is_relation:
        field = field.target_field  # a parent link: the key it holds
    return isinstance(
        field,
        models.IntegerField | models.CharField | models.TextField | models.UUIDField,
    )


@dataclass(frozen=True, slots=True)
class Subject:
    """A declared subject (what :func:`subject` registered)."""

    name: str
    tables: tuple[Table, ...]
    storage: str | Callable[[], Any]
    batch: int
    queue: str | Callable[[], str]
    origin: str

    def table(self, index: int) -> Table:
        """The table at ``index`` of ``tables``."""
        return self.tables[index]

    def unerased(self) -> list[PersonalDataUnerased]:
        """One refusal per table whose erase leaves a marked field as it is."""
        found = []
        for spec in self.tables:
            missing = spec.unerased()
            if missing:
                fields = ", ".join(f"{spec.label}.{name}" for name in missing)
                found.append(
                    PersonalDataUnerased(
                        f"subject {self.name!r} erases the {spec.label} table "
                        f"with {spec.erase.describe()}, which leaves the "
                        f"personal data in {fields} as it is",
                        meta={
                            "subject": self.name,
                            "model": spec.label,
                            "fields": missing,
                        },
                    )
                )
        return found

    def check_key(self, key: Any) -> None:
        """Refuse a key some table's ``by=`` cannot take (no statement run).

        Raises:
            SubjectKeyInvalid: the key is not a string or a whole number,
                or some ``by=`` field refuses it.
        """
        if isinstance(key, bool) or not isinstance(key, str | int) or key == "":
            raise SubjectKeyInvalid(
                f"the key of subject {self.name!r} must be a non-empty string "
                f"or a whole number, not a {type(key).__name__}",
                meta={"subject": self.name},
            )
        for spec in self.tables:
            spec.rows(key)  # building the filter preps the key: a misfit raises


def subject(
    *,
    name: str,
    tables: Sequence[Table],
    storage: str | Callable[[], Any] = DEFAULT_STORAGE,
    batch: int = DEFAULT_BATCH,
    queue: str | Callable[[], str] | None = None,
) -> Subject:
    """Declare a data subject: the tables that hold one person's rows.

    Args:
        name: the durable name (requests and the audit carry it).
        tables: ``table(...)`` entries, each model once. An erase treats
            them in this order: list a table that references another first.
        storage: where exports go: an alias of ``settings.STORAGES``, or a
            callable answering a ``Storage`` (asked at each write).
        batch: rows per page (one durable step each).
        queue: the queue its export and erase jobs go to (default
            ``HOUSEKEEPING_QUEUE``, which every worker serves).

    Raises:
        SubjectDeclarationInvalid: a bad argument (nothing registered).
        JobDuplicate: another declaration holds the name.
    """
    problems = []
    wrong = name_problem(name)
    if wrong is None and len(name) > MAX_NAME_LENGTH:
        wrong = f"must be at most {MAX_NAME_LENGTH} characters"
    if wrong is not None:
        problems.append(f"name {wrong}")
    if (
        isinstance(tables, str)
        or not isinstance(tables, Sequence)
        or not tables
        or not all(isinstance(t, Table) for t in tables)
    ):
        problems.append("tables must be a non-empty list of table(...) entries")
    else:
        labels = [t.label for t in tables]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            problems.append(f"each model is listed once; twice: {', '.join(twice)}")
    if not callable(storage) and (not isinstance(storage, str) or not storage):
        problems.append("storage must be a STORAGES alias or a callable")
    if (
        isinstance(batch, bool)
        or not isinstance(batch, int)
        or not 1 <= batch <= MAX_BATCH
    ):
        problems.append(f"batch must be a whole number from 1 to {MAX_BATCH}")
    if queue is not None and not callable(queue):
        queue_wrong = name_problem(queue)
        if queue_wrong is not None:
            problems.append(f"queue {queue_wrong}")
    if problems:
        shown = name[:60] if isinstance(name, str) else repr(name)[:60]
        raise SubjectDeclarationInvalid(
            f"subject {shown!r} is invalid: " + "; ".join(problems),
            meta={"subject": shown, "problems": problems},
        )
    from ..maintenance.builtin import housekeeping_queue

    frame = sys._getframe(1)
    declared = Subject(
        name=name,
        tables=tuple(tables),
        storage=storage,
        batch=batch,
        queue=queue if queue is not None else housekeeping_queue,
        origin=f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}",
    )
    with _lock:
        # A frozen dataclass's fields are read-only, which the protocol's
        # plain attributes do not say: the check itself is the same.
        put_unique(_subjects, declared, "subjects")  # type: ignore[type-var]
    return declared


def registered_subjects() -> list[Subject]:
    """Every declared subject, by name."""
    with _lock:
        return [_subjects[name] for name in sorted(_subjects)]


def get_subject(name: str) -> Subject:
    """The subject declared under ``name``.

    Raises:
        SubjectUnknown: none is.
    """
    found = _subjects.get(name) if isinstance(name, str) else None
    if found is None:
        raise SubjectUnknown(
            f"no subject is declared under the name {str(name)[:100]!r}",
            meta={"subject": str(name)[:100]},
        )
    return found


def unregister_subject(name: str) -> None:
    """Forget a subject (tests and docs examples declare them on the fly)."""
    with _lock:
        _subjects.pop(name, None)


def personal_data_problems(app_labels: set[str] | None = None) -> list[JobsError]:
    """Every marked field no subject erases (what the system check reports).

    - ``X_PERSONAL_DATA_UNREACHED``: a model with marked fields that no
      subject lists;
    - ``X_PERSONAL_DATA_UNERASED``: a listed table whose ``erase=`` leaves
      a marked field as it is.
    """
    subjects = registered_subjects()
    reached = {spec.model for s in subjects for spec in s.tables}
    found: list[JobsError] = []
    for model, marks in marked_models(app_labels):
        if model not in reached:
            label = label_of(model)
            fields = ", ".join(f"{label}.{name}" for name in marks)
            verb = "holds" if len(marks) == 1 else "hold"
            found.append(
                PersonalDataUnreached(
                    f"{fields} {verb} personal data, and no subject lists the "
                    f"{label} table: an erase would leave it there",
                    meta={"model": label, "fields": list(marks)},
                )
            )
    for declared in subjects:
        for problem in declared.unerased():
            if app_labels is None or problem.meta["model"].split(".")[0] in app_labels:
                found.append(problem)
    return found
