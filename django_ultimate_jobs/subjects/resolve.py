"""Models and fields named in declarations: resolved once, refused with a code."""

from __future__ import annotations

from typing import Any

from django.db import models

from .errors import SubjectFieldUnknown, SubjectModelUnknown

__all__ = ["label_of", "local_field", "resolve_model", "resolve_path"]

LOOKUP_SEP = "__"


def resolve_model(model: Any) -> type[models.Model]:
    """The model class ``model`` names (a class or an ``app_label.Model`` label).

    Raises:
        SubjectModelUnknown: no installed app defines it (or it is a proxy,
            abstract or swapped out, so it has no table of its own).
    """
    if isinstance(model, str):
        from django.apps import apps

        try:
            found: type[models.Model] = apps.get_model(model)
        except (LookupError, ValueError):
            raise SubjectModelUnknown(
                f"no installed app defines the model {model!r}",
                meta={"model": model},
            ) from None
        model = found
    if not (isinstance(model, type) and issubclass(model, models.Model)):
        raise SubjectModelUnknown(
            f"{type(model).__name__} is not a model class or an "
            "'app_label.ModelName' label",
            meta={"model": repr(model)[:100]},
        )
    opts = model._meta
    if opts.abstract or opts.proxy or opts.swapped:
        kind = "abstract" if opts.abstract else "proxy" if opts.proxy else "swapped"
        raise SubjectModelUnknown(
            f"the model {opts.label} is {kind}: name the concrete model that "
            "holds the rows",
            meta={"model": opts.label},
        )
    return model


def label_of(model: type[models.Model]) -> str:
    """``app_label.ModelName``, as the audit and the export name a model."""
    return str(model._meta.label)


def local_field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The concrete field ``name`` stored in ``model``'s own table.

    Raises:
        SubjectFieldUnknown: no such field, or one that is not a column of
            this table (a reverse relation, a many-to-many, a parent's).
    """
    from django.core.exceptions import FieldDoesNotExist

    label = label_of(model)
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        raise SubjectFieldUnknown(
            f"the model {label} has no field {name!r}",
            meta={"model": label, "field": name},
        ) from None
    if field not in model._meta.local_concrete_fields:
        raise SubjectFieldUnknown(
            f"{label}.{name} is not a column of the {label} table (a relation "
            "from elsewhere, a many-to-many or a parent model's field)",
            meta={"model": label, "field": name},
        )
    return field  # type: ignore[return-value]


def resolve_path(model: type[models.Model], path: Any) -> models.Field[Any, Any]:
    """The field at the end of ``path`` (``"customer"``, ``"order__customer"``).

    Each step but the last must be a foreign key or one-to-one field of the
    model reached so far (forward only: one row never fans out into many),
    and ``pk`` names a model's primary key.

    Raises:
        SubjectFieldUnknown: a step names no such field or a relation that
            fans out (a reverse relation, a many-to-many).
    """
    label = label_of(model)
    if not isinstance(path, str) or not path or path.strip() != path:
        raise SubjectFieldUnknown(
            f"by= of the {label} table must name a field, e.g. 'pk' or 'customer'",
            meta={"model": label},
        )
    current = model
    field: Any = None
    for step in path.split(LOOKUP_SEP):
        if field is not None:
            if (
                not (field.many_to_one or field.one_to_one)
                or field.remote_field is None
            ):
                raise SubjectFieldUnknown(
                    f"by={path!r} of the {label} table goes on from "
                    f"{field.name!r}, which is not a foreign key",
                    meta={"model": label, "by": path},
                )
            current = field.remote_field.model
        name = current._meta.pk.name if step == "pk" else step
        try:
            field = local_field(current, name)
        except SubjectFieldUnknown:
            raise SubjectFieldUnknown(
                f"by={path!r} of the {label} table: {label_of(current)} has no "
                f"foreign key or column {step!r}",
                meta={"model": label, "by": path},
            ) from None
    return field  # type: ignore[no-any-return]
