"""``personal_data`` marks: which model fields hold a person's data.

Two forms, one answer (:func:`personal_data_fields`):

- on your own models, wrap the field where it is declared::

      email = personal_data(models.EmailField(unique=True), kind="contact")

  The mark is an attribute of the field object, so it sits beside the
  field, follows it into abstract-model subclasses, and is not part of
  ``deconstruct()``: marking a field writes no migration.
- on models you do not own (``auth.User``, a third-party app's), register
  the fields from your app's ``jobs.py`` or ``AppConfig.ready()``::

      mark_personal_data(User, "email", "first_name", "last_name")

A ``Meta`` option would need Django's ``Meta`` names patched (a ``class
Meta`` with an unknown attribute is a ``TypeError``), and ``db_comment``
would write the mark into migrations and the schema: neither is used.
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from django.db import models

from ..validation import text_problem
from .errors import SubjectDeclarationInvalid
from .resolve import label_of, local_field, resolve_model

__all__ = [
    "DEFAULT_KIND",
    "mark_personal_data",
    "marked_models",
    "personal_data",
    "personal_data_fields",
    "registered_marks",
    "unmark_personal_data",
]

DEFAULT_KIND = "personal"
MAX_KIND_LENGTH = 50
_ATTR = "ultimate_jobs_personal_data"
"""The attribute :func:`personal_data` sets on a field: its kind."""

F = TypeVar("F", bound=models.Field)  # type: ignore[type-arg]

_lock = threading.Lock()
_marks: dict[str, dict[str, str]] = {}
"""Model label -> field name -> kind, for :func:`mark_personal_data`."""


def _checked_kind(kind: Any) -> str:
    problem = text_problem(kind, max_chars=MAX_KIND_LENGTH)
    if problem is not None:
        raise SubjectDeclarationInvalid(
            f"the kind of a personal_data mark {problem} "
            f"(at most {MAX_KIND_LENGTH} characters)",
            fix="pass kind='contact' (or another short label), or leave it out",
        )
    return str(kind)


def personal_data(field: F, *, kind: str = DEFAULT_KIND) -> F:
    """Mark ``field`` as holding personal data and answer it, for models.py.

    Args:
        field: the field instance, as it would be assigned in the model.
        kind: a short label (``"contact"``, ``"identity"``...), shown by
            the export manifest and ``jobs_subject list``.

    Raises:
        SubjectDeclarationInvalid: ``field`` is not a model field, or
            ``kind`` is not a short non-empty string.
    """
    if not isinstance(field, models.Field):
        raise SubjectDeclarationInvalid(
            f"personal_data() wraps a model field, not a {type(field).__name__}",
            fix="email = personal_data(models.EmailField(...))",
        )
    if field.many_to_many or (field.is_relation and not field.concrete):
        raise SubjectDeclarationInvalid(
            "personal_data() marks a column: a many-to-many is not one",
            fix="mark the columns of the related model instead",
        )
    setattr(field, _ATTR, _checked_kind(kind))
    return field


def mark_personal_data(model: Any, *fields: str, kind: str = DEFAULT_KIND) -> None:
    """Mark ``fields`` of ``model`` (a class or an ``app.Model`` label) personal.

    For models whose source you do not own; call it from ``jobs.py`` or
    ``AppConfig.ready()``. Marking a field again replaces its kind.

    Raises:
        SubjectModelUnknown: no installed app defines the model.
        SubjectFieldUnknown: a name is not a column of the model's table.
        SubjectDeclarationInvalid: no field named, or a bad ``kind``.
    """
    resolved = resolve_model(model)
    checked = _checked_kind(kind)
    if not fields:
        raise SubjectDeclarationInvalid(
            f"mark_personal_data({label_of(resolved)}) names no field",
            fix=f"mark_personal_data({label_of(resolved)}, 'email', ...)",
        )
    for name in fields:
        local_field(resolved, name)
    with _lock:
        _marks.setdefault(label_of(resolved), {}).update(dict.fromkeys(fields, checked))


def unmark_personal_data(model: Any, *fields: str) -> None:
    """Forget registered marks of ``model`` (all of them without ``fields``).

    Marks made with :func:`personal_data` on the field itself stay.
    """
    label = label_of(resolve_model(model))
    with _lock:
        marks = _marks.get(label, {})
        for name in fields or list(marks):
            marks.pop(name, None)
        if not marks:
            _marks.pop(label, None)


def registered_marks() -> dict[str, dict[str, str]]:
    """Model label -> field -> kind of the marks :func:`mark_personal_data` made."""
    with _lock:
        return {label: dict(fields) for label, fields in _marks.items()}


def personal_data_fields(model: type[models.Model]) -> dict[str, str]:
    """Field name -> kind of every marked column of ``model``'s own table."""
    found = {
        field.name: getattr(field, _ATTR)
        for field in model._meta.local_concrete_fields
        if hasattr(field, _ATTR)
    }
    with _lock:
        found.update(_marks.get(label_of(model), {}))
    return dict(sorted(found.items()))


def marked_models(
    app_labels: set[str] | None = None,
) -> list[tuple[type[models.Model], dict[str, str]]]:
    """Every installed concrete model with a marked field, and its marks.

    Proxy and swapped-out models are left out: they have no table of their
    own. ``app_labels`` narrows it to those apps.
    """
    from django.apps import apps

    found = []
    for model in apps.get_models():
        opts = model._meta
        if opts.proxy or opts.swapped:
            continue
        if app_labels is not None and opts.app_label not in app_labels:
            continue
        marks = personal_data_fields(model)
        if marks:
            found.append((model, marks))
    return sorted(found, key=lambda pair: label_of(pair[0]))
