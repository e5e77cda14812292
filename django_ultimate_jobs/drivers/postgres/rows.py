"""Build a frozen slotted dataclass straight from a result row, fast.

A frozen dataclass's generated ``__init__`` sets each field with
``object.__setattr__`` by name and matches keyword arguments: for the
claim's ``ClaimedJob`` (18 fields) that was ~3 us a row, the largest
per-row cost of the worker's claim loop after the row fetch itself
(bench/README.md). :func:`row_builder` compiles, once, a function that
allocates the instance and stores each slot through its member descriptor,
reading the row by position: the same object (same class, fields, equality,
``replace()``), about a quarter of the cost. Only for dataclasses with
``slots=True`` whose ``__init__`` does nothing else (no ``__post_init__``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["row_builder"]

T = TypeVar("T")


def row_builder(
    cls: type[T],
    columns: Mapping[str, int],
    *,
    decode: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Callable[[Any], T]:
    """A function ``row -> cls`` reading field ``f`` from ``row[columns[f]]``.

    ``decode`` maps a field to a function applied to its column. A field not
    in ``columns`` gets its default (it must have a plain one).
    """
    if hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: a slotted dataclass without __post_init__")
    decode = decode or {}
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = ["def build(row):", "    obj = _new(_cls)"]
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        setter = f"_set_{field.name}"
        namespace[setter] = cls.__dict__[field.name].__set__
        if field.name in columns:
            value = f"row[{columns[field.name]}]"
            if field.name in decode:
                namespace[f"_decode_{field.name}"] = decode[field.name]
                value = f"_decode_{field.name}({value})"
        elif field.default is not dataclasses.MISSING:
            namespace[f"_default_{field.name}"] = field.default
            value = f"_default_{field.name}"
        else:
            raise TypeError(f"{cls.__name__}.{field.name}: no column and no default")
        lines.append(f"    {setter}(obj, {value})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # noqa: S102 (our own field names only)
    build: Callable[[Any], T] = namespace["build"]
    return build
