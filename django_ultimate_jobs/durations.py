"""Duration parsing: ``"30s"``, ``"5m"``, ``"3d"``, milliseconds, timedelta.

Refuse, never clamp: anything non-finite, negative, or zero where a ceiling
is meant raises ``X_DURATION_INVALID`` (or the caller's own code).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import TypeAlias

from .errors import DurationInvalid

__all__ = ["DurationInput", "is_count", "parse_duration_ms"]

DurationInput: TypeAlias = str | int | float | timedelta

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


def parse_duration_ms(
    value: DurationInput, *, what: str = "duration", allow_zero: bool = False
) -> int:
    """Return ``value`` in whole milliseconds.

    Args:
        value: ``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"3d"``, an int
            (or integral float) of milliseconds, or a ``timedelta``.
        what: the option's name, for the error message.
        allow_zero: accept 0 (delays may be zero; ceilings may not).

    Raises:
        DurationInvalid: the value is not a finite, positive duration.
    """
    ms: float
    if isinstance(value, bool):
        raise DurationInvalid(f"{what} must be a duration, not a bool")
    if isinstance(value, timedelta):
        ms = value.total_seconds() * 1000
    elif isinstance(value, int | float):
        try:
            ms = float(value)
        except OverflowError:
            raise DurationInvalid(f"{what} is out of range") from None
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise DurationInvalid(
                f"{what} {value!r} is not a duration like '30s', '5m' or '3d'"
            )
        ms = float(match.group(1)) * _UNIT_MS[match.group(2)]
    else:
        raise DurationInvalid(f"{what} must be a duration, not {type(value).__name__}")
    whole = round(ms) if math.isfinite(ms) else 0
    # A positive value that rounds to 0 ms would read as "no ceiling": refuse.
    if not math.isfinite(ms) or ms < 0 or (whole == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise DurationInvalid(f"{what} must be finite and {bound}, got {value!r}")
    return whole


def is_count(value: object, minimum: int = 1) -> bool:
    """Whether ``value`` is a whole, finite number of at least ``minimum``.

    Bools are refused (``True`` is not a count); an integral float such as
    ``8.0`` is accepted. A ``NaN`` from an unset environment variable would
    otherwise become a spin loop or a lease that never lapses.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value == int(value) and value >= minimum
    except OverflowError:
        return False
