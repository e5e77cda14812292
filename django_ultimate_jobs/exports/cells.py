"""Cells checked against the field they load into, before any part loads.

A part that decodes (every cell a value of its manifest type) can still hold
a value its field's column cannot take: a NULL in a NOT NULL column, a NUL
character (PostgreSQL text and jsonb cannot hold one), a string over
``max_length``, a decimal with more digits than ``max_digits`` /
``decimal_places``, an integer outside the column type's range, text that is
no IP address for an ``inet`` column. Each is refused here, in the verify
pass, so an import loads nothing from an artifact with one such cell, rather
than the parts before it. One rule is the import's own: an auto-numbered
field (``AutoField`` and kin) takes values up to one below its type's
maximum, since the sequence moved past the loaded rows must number the
next insert.

What is not checked here (a ``CHECK`` constraint, a unique field other than
the key, a foreign key's target) is refused by the database at the load of
the part that holds it (``X_IMPORT_ROW_INVALID`` too).

A check answers the reason, never the value.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from django.db import connections, models, router

from .columns import Column

__all__ = ["CellCheck", "cell_checks"]

CellCheck = Callable[[Any], str | None]
"""A field's check of one decoded cell: ``None``, or why it is refused."""

_INTEGER_TYPES = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "SmallAutoField",
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
    }
)
_AUTO_TYPES = frozenset({"AutoField", "BigAutoField", "SmallAutoField"})
_VARCHAR_TYPES = frozenset(
    {"CharField", "SlugField", "FilePathField", "FileField", "IPAddressField"}
)
_INET_TYPES = frozenset({"GenericIPAddressField", "IPAddressField"})


def _base(field: models.Field[Any, Any]) -> models.Field[Any, Any]:
    """The field whose column stores the value (a foreign key: its target's)."""
    while field.is_relation and getattr(field, "target_field", None) is not None:
        field = field.target_field  # type: ignore[attr-defined]
    return field


def _has_nul(value: Any) -> bool:
    """A NUL anywhere in a string, or in a JSON document's keys and strings."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _decimal_problem(value: Decimal, max_digits: int, places: int) -> str | None:
    whole = int(abs(value))
    whole_digits = len(str(whole)) if whole else 0
    if whole_digits > max_digits - places:
        return (
            f"a decimal with {whole_digits} digits before the point, the field "
            f"takes {max_digits - places} (max_digits={max_digits}, "
            f"decimal_places={places})"
        )
    exponent = value.normalize().as_tuple().exponent
    decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    if decimals > places:
        return (
            f"a decimal with {decimals} decimal places, the field keeps {places} "
            "(the database would round it)"
        )
    return None


def _field_check(
    field: models.Field[Any, Any], column: Column, connection: Any
) -> CellCheck:
    base = _base(field)
    kind = base.get_internal_type()
    nullable = field.null and column.nullable
    why_null = (
        f"null, the field {field.name} is not nullable"
        if not field.null
        else "null, the manifest says the column is not nullable"
    )
    # Auto-numbered itself, not through a foreign key (which may point at
    # a row holding the last value).
    auto = field.get_internal_type() in _AUTO_TYPES
    low: int | None = None
    high: int | None = None
    if kind in _INTEGER_TYPES:
        low, high = connection.ops.integer_field_range(kind)
        if auto and high is not None:
            high -= 1  # the sequence moved past it must number one more row
    max_length = base.max_length if kind in _VARCHAR_TYPES else None
    digits = getattr(base, "max_digits", None) if kind == "DecimalField" else None
    places = getattr(base, "decimal_places", None) or 0

    def check(value: Any) -> str | None:
        if value is None:
            return None if nullable else why_null
        if isinstance(value, str | dict | list) and _has_nul(value):
            return "a NUL character, which PostgreSQL text and JSON cannot hold"
        if low is not None and high is not None and isinstance(value, int):
            if not low <= value <= high:
                return f"an integer outside {low}..{high}, the range of a {kind}" + (
                    " less its last value" if auto else ""
                )
        elif max_length is not None and isinstance(value, str):
            if len(value) > max_length:
                return f"{len(value)} characters, over max_length={max_length}"
        elif digits is not None and isinstance(value, Decimal):
            return _decimal_problem(value, digits, places)
        if kind in _INET_TYPES and isinstance(value, str):
            try:
                ipaddress.ip_address(value)
            except ValueError:
                return "not an IP address"
        return None

    return check


def cell_checks(
    model: type[models.Model],
    columns: Sequence[Column],
    mapping: Sequence[tuple[int, models.Field[Any, Any]]],
) -> list[tuple[int, CellCheck]]:
    """(manifest column index, check) for each loaded column."""
    connection = connections[router.db_for_write(model)]
    return [
        (index, _field_check(field, columns[index], connection))
        for index, field in mapping
    ]
