"""The model a pass declares, and the fields it names, found or refused.

A declaration names its model as a class or as ``"app_label.Model"``; it
is resolved once the app registry is ready (the declaration itself, in an
app's ``jobs.py``, already is). Every problem is answered as text that
finishes "... is invalid: <problem>", for the kind's coded error.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db import models

__all__ = ["field_at", "model_label", "resolve_model"]


def model_label(ref: Any) -> str:
    """``app_label.Model`` of a model class or label, as declared."""
    if isinstance(ref, type) and issubclass(ref, models.Model):
        return ref._meta.label
    return str(ref)


def resolve_model(ref: Any) -> type[models.Model] | str:
    """The model ``ref`` names, or what is wrong with it."""
    if isinstance(ref, type) and issubclass(ref, models.Model):
        if ref._meta.abstract:
            return f"model {ref.__name__} is abstract: it has no rows"
        return ref
    if not isinstance(ref, str) or ref.count(".") != 1:
        return f"model must be a model class or 'app_label.Model', got {ref!r:.80}"
    try:
        return apps.get_model(ref)
    except LookupError:
        return f"model {ref!r} is unknown (no installed app has it)"


def field_at(model: type[models.Model], path: str) -> models.Field[Any, Any] | str:
    """The concrete field ``path`` (``"customer__email"``) ends at, or what is wrong.

    A relation may be followed by ``__``; the path must end at a field
    with a column (a foreign key answers its own field: its value is the
    related row's key).
    """
    if not isinstance(path, str) or not path:
        return f"a field must be a non-empty string, got {path!r:.80}"
    current: type[models.Model] = model
    parts = path.split("__")
    for n, part in enumerate(parts):
        try:
            field = current._meta.get_field(part)
        except FieldDoesNotExist:
            names = ", ".join(f.name for f in current._meta.get_fields() if f.concrete)
            return (
                f"field {path!r}: {current._meta.label} has no field {part!r} "
                f"(its fields: {names})"
            )
        last = n == len(parts) - 1
        if not last:
            if not (field.is_relation and (field.many_to_one or field.one_to_one)):
                return f"field {path!r}: {part!r} is no foreign key to follow"
            related = field.related_model
            assert isinstance(related, type)
            current = related
            continue
        if not field.concrete or field.many_to_many or field.one_to_many:
            return f"field {path!r} has no column (a reverse or many-to-many relation)"
        assert isinstance(field, models.Field)
        return field
    raise AssertionError("unreachable")  # pragma: no cover
