"""JSON text for ``jsonb`` columns that reads back with the types it was given.

``jsonb`` stores a number as ``numeric`` and prints it back in plain digits,
keeping the digits after a decimal point but not an exponent. ``json.dumps``
writes a float of 1e16 or more with an exponent (``1e+16``), so it came back
as ``10000000000000000``, which ``json.loads`` reads as an ``int``: a task
given ``1e16`` received an ``int``. Every smaller float is written with a
fraction (``2.0``) or a negative exponent (``1e-07``, printed back as
``0.0000001``) and stays a float. So :func:`dumps` writes each float that has
an exponent as its exact whole value with ``.0``: a float that large is a
whole number, and those digits parse back to the very same float.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["dumps", "exact_floats", "loads"]

# A JSON string (skipped whole, so its text is never touched), or a number
# with a positive exponent, as Python's float repr writes one ("1.5e+300").
_STRING_OR_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?e\+\d+)')
# Built once: json.dumps() with keyword arguments builds one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(value: Any) -> str:
    """Compact JSON of ``value`` whose floats stay floats through ``jsonb``.

    Raises:
        TypeError, ValueError: not JSON-serialisable, or a non-finite number.
    """
    return exact_floats(_ENCODER.encode(value))


def exact_floats(text: str) -> str:
    """``text`` (compact JSON) with each float written with an exponent made exact."""
    if "e+" not in text:
        return text  # nearly always: one scan of the text, no regex
    return _STRING_OR_EXPONENT.sub(_whole_float, text)


def loads(value: Any) -> Any:
    """Decode a ``jsonb`` column (text: Django registers a text loader for jsonb)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def _whole_float(match: re.Match[str]) -> str:
    number = match.group(1)
    if number is None:
        return match.group(0)
    return f"{int(float(number))}.0"
