"""Duration parsing: ``"30s"``, ``"5m"``, ``"3d"``, milliseconds, timedelta.

Refuse, never clamp: anything negative, zero where a ceiling is meant, or
longer than :data:`MAX_DURATION_MS` raises ``X_DURATION_INVALID`` (or the
caller's own code).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import TypeAlias

from .errors import DurationInvalid

__all__ = [
    "MAX_DURATION",
    "MAX_DURATION_MS",
    "MAX_DURATION_TEXT",
    "DurationInput",
    "is_count",
    "parse_duration_ms",
]

DurationInput: TypeAlias = str | int | timedelta

MAX_DURATION_MS = 36_500 * 86_400_000
"""The longest duration anywhere (a delay, a sleep, a retry delay, a ttl, a
setting): 36,500 days, 100 years of 365 days. Far past any real schedule,
and far inside what PostgreSQL's ``interval``, its ``timestamptz`` and
Python's ``datetime`` can hold, so a duration never fails inside a statement
(which would abort the caller's transaction). A ``run_at`` may be at most
this far from now."""
MAX_DURATION = timedelta(milliseconds=MAX_DURATION_MS)
MAX_DURATION_TEXT = "36500d (100 years)"

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# ASCII digits only (``\d`` would take any script's digits), no spaces.
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")


def parse_duration_ms(
    value: DurationInput, *, what: str = "duration", allow_zero: bool = False
) -> int:
    """Return ``value`` in whole milliseconds.

    Args:
        value: ``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"3d"`` (ASCII
            digits, an optional decimal fraction such as ``"1.5s"``, no
            spaces), an int of milliseconds, or a ``timedelta``.
        what: the option's name, for the error message.
        allow_zero: accept 0 (delays may be zero; ceilings may not).

    Raises:
        DurationInvalid: the value is not a duration, is negative, is zero
            (without ``allow_zero``), or is longer than 36500d.
    """
    ms = _milliseconds(value, what)
    if ms > MAX_DURATION_MS:
        raise DurationInvalid(
            f"{what} must be at most {MAX_DURATION_TEXT}, got {value!r:.80}",
            fix=f"shorten {what} to at most 36500d",
        )
    # A positive value that rounds to 0 ms would read as "no ceiling": refuse.
    if ms < 0 or (round(ms) == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise DurationInvalid(
            f"{what} must be {bound}, got {value!r:.80}",
            fix="pass a positive duration such as '30s'"
            + (", or 0" if allow_zero else ""),
        )
    return round(ms)


def _milliseconds(value: object, what: str) -> float:
    """``value`` in (possibly fractional) milliseconds, unbounded."""
    if isinstance(value, bool):
        raise DurationInvalid(f"{what} must be a duration, not a bool")
    if isinstance(value, timedelta):
        return value / timedelta(milliseconds=1)
    if isinstance(value, int):
        # Bounded as an int first: 10**400 would overflow a float.
        return float(max(-1, min(value, MAX_DURATION_MS + 1)))
    if isinstance(value, float):
        raise DurationInvalid(
            f"{what} must be an int of milliseconds, not a float ({value!r})",
            fix=f"pass {what} as an int of milliseconds, a string like '1.5s', "
            "or a timedelta",
        )
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            raise DurationInvalid(
                f"{what} {value!r:.80} is not a duration like '30s', '5m' or '3d' "
                "(digits and a unit: ms, s, m, h or d, without spaces)"
            )
        return float(match.group(1)) * _UNIT_MS[match.group(2)]
    raise DurationInvalid(f"{what} must be a duration, not {type(value).__name__}")


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
