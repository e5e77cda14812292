"""Columns: a field's value type, as the manifest's schema states it.

Every exported column has one of a few types, from its model field (a
foreign key: the key of the row it points at). Each type says how a value
is written (CSV text, an NDJSON value) and read back, so an import
restores what was exported: ``integer``, ``number`` (a float), ``decimal``
(exact, as text), ``boolean``, ``string``, ``datetime``, ``date``,
``time``, ``duration`` (ISO 8601), ``uuid`` and ``json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models

from ..keyset.target import field_at

__all__ = ["TYPES", "Column", "column_of", "field_type"]

TYPES = (
    "integer",
    "number",
    "decimal",
    "boolean",
    "string",
    "datetime",
    "date",
    "time",
    "duration",
    "uuid",
    "json",
)
_BY_INTERNAL_TYPE = {
    "AutoField": "integer",
    "BigAutoField": "integer",
    "SmallAutoField": "integer",
    "IntegerField": "integer",
    "BigIntegerField": "integer",
    "SmallIntegerField": "integer",
    "PositiveIntegerField": "integer",
    "PositiveBigIntegerField": "integer",
    "PositiveSmallIntegerField": "integer",
    "FloatField": "number",
    "DecimalField": "decimal",
    "BooleanField": "boolean",
    "CharField": "string",
    "TextField": "string",
    "SlugField": "string",
    "GenericIPAddressField": "string",
    "IPAddressField": "string",
    "FilePathField": "string",
    "FileField": "string",
    "DateTimeField": "datetime",
    "DateField": "date",
    "TimeField": "time",
    "DurationField": "duration",
    "UUIDField": "uuid",
    "JSONField": "json",
}


@dataclass(frozen=True, slots=True)
class Column:
    """One column of an export: its name (the field path), type and nullability."""

    name: str
    type: str
    nullable: bool

    def to_json(self) -> dict[str, Any]:
        """The manifest's form."""
        return {"name": self.name, "type": self.type, "nullable": self.nullable}


def field_type(field: models.Field[Any, Any]) -> str | None:
    """The column type of ``field`` (a foreign key: its target's), or ``None``."""
    while field.is_relation:
        target = getattr(field, "target_field", None)
        if target is None:
            return None
        field = target
    return _BY_INTERNAL_TYPE.get(field.get_internal_type())


def column_of(model: type[models.Model], path: str) -> Column | str:
    """The column ``path`` makes, or what is wrong with it."""
    field = field_at(model, path)
    if isinstance(field, str):
        return field
    kind = field_type(field)
    if kind is None:
        return (
            f"field {path!r} is a {type(field).__name__}, which has no export "
            f"type (types: {', '.join(TYPES)})"
        )
    # A value reached through a foreign key is null when the key is.
    return Column(name=path, type=kind, nullable=field.null or "__" in path)
