"""Retry policy: backoff curves, jitter, and the decision after a failure.

Pure functions over a :class:`Retry` policy; the worker's executor applies
the decision. Classification is by error code (``errors.retry_class_of``):
terminal codes stop now, retry-after codes wait the stated delay, anything
else follows the backoff schedule until attempts run out.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from .durations import MAX_DURATION_MS, DurationInput, parse_duration_ms
from .errors import (
    DurationInvalid,
    JobDeclarationInvalid,
    RetryClass,
    code_of,
    retry_class_of,
)

__all__ = [
    "MAX_ATTEMPTS",
    "Retry",
    "RetryDecision",
    "backoff_delay_ms",
    "decide_retry",
    "retry_schedule_ms",
]

MAX_ATTEMPTS = 1_000_000
"""The largest ``Retry(attempts=...)``: the row stores it in an integer
column, so a larger count passed declaration and failed every enqueue with
a raw ``DataError`` (a million attempts an hour apart is over a century)."""

Backoff = Literal["exponential", "linear", "fixed"]
Jitter = Literal["equal", "full", "none"]


@dataclass(frozen=True, slots=True)
class Retry:
    """How a job retries.

    Args:
        attempts: total attempts including the first (1 = never retried).
        backoff: ``"exponential"`` (delay * 2**(n-1)), ``"linear"`` (delay * n)
            or ``"fixed"``.
        delay: the base delay.
        max_delay: the cap for any single delay (and for stated delays).
        jitter: ``"equal"`` (half fixed, half random: the default, so a
            repeatedly failing job never gets a near-zero wait), ``"full"``
            or ``"none"``.
        dead_letter: when exhausted, park the job as ``dead`` (True) or
            settle it ``failed`` (False).
    """

    attempts: int = 3
    backoff: Backoff = "exponential"
    delay: DurationInput = "1s"
    max_delay: DurationInput = "1h"
    jitter: Jitter = "equal"
    dead_letter: bool = True

    def __post_init__(self) -> None:
        attempts = self.attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise JobDeclarationInvalid(
                "Retry(attempts=...) must be a whole count of at least 1 (an int), "
                f"got {attempts!r:.40}",
                fix="Retry(attempts=1) never retries; attempts=5 tries five times",
            )
        if attempts > MAX_ATTEMPTS:
            raise JobDeclarationInvalid(
                f"Retry(attempts=...) must be at most {MAX_ATTEMPTS:_}, got {attempts!r:.40}",
                fix="Retry(attempts=1) never retries; attempts=5 tries five times",
            )
        if self.backoff not in ("exponential", "linear", "fixed"):
            raise JobDeclarationInvalid(
                f"Retry(backoff=...) must be exponential, linear or fixed, not {self.backoff!r}"
            )
        if self.jitter not in ("equal", "full", "none"):
            raise JobDeclarationInvalid(
                f"Retry(jitter=...) must be equal, full or none, not {self.jitter!r}"
            )
        # Parse now so a bad duration fails at import, not at the first retry.
        try:
            self.delay_ms  # noqa: B018
            self.max_delay_ms  # noqa: B018
        except DurationInvalid as error:
            raise JobDeclarationInvalid(error.cause, fix=error.fix) from None

    @property
    def delay_ms(self) -> int:
        """The base delay in milliseconds."""
        return parse_duration_ms(self.delay, what="Retry(delay=...)", allow_zero=True)

    @property
    def max_delay_ms(self) -> int:
        """The cap in milliseconds."""
        return parse_duration_ms(self.max_delay, what="Retry(max_delay=...)")


def backoff_delay_ms(
    policy: Retry,
    attempt: int,
    *,
    jitter: bool = True,
    rng: random.Random | None = None,
) -> int:
    """Return the wait after failed attempt ``attempt`` (1-based)."""
    n = max(1, attempt)
    base = policy.delay_ms
    if policy.backoff == "fixed":
        raw = float(base)
    elif policy.backoff == "linear":
        raw = float(base * n)
    else:
        raw = base * math.pow(2, min(n - 1, 62))
    capped = min(raw, float(policy.max_delay_ms))
    if not jitter or policy.jitter == "none":
        return round(capped)
    draw = (rng or random).random()
    if policy.jitter == "full":
        return round(capped * draw)
    return round(capped / 2 + capped / 2 * draw)


def retry_schedule_ms(policy: Retry) -> list[int]:
    """Every delay of the policy with jitter off (for ``jobs show``)."""
    return [
        backoff_delay_ms(policy, n, jitter=False) for n in range(1, policy.attempts)
    ]


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What to do after a failed attempt."""

    retry: bool
    delay_ms: int = 0
    counts_as_attempt: bool = True
    stopped_by: Literal["terminal", "attempts-exhausted"] | None = None


def decide_retry(
    policy: Retry,
    attempt: int,
    error: BaseException,
    *,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Classify ``error`` after attempt ``attempt`` and decide the next step.

    ``X_RATE_LIMITED`` is "not yet": rescheduled without spending the
    attempt, waiting at least the stated delay (a floor, not capped).
    """
    code = code_of(error)
    klass = retry_class_of(code)
    meta = getattr(error, "meta", None) or {}
    stated = _stated_seconds(meta)
    if code == "X_RATE_LIMITED":
        wait = (
            round(float(stated) * 1000)
            if stated is not None
            else backoff_delay_ms(policy, attempt, jitter=False)
        )
        spread = min(wait / 2, policy.max_delay_ms) * (rng or random).random()
        return RetryDecision(True, round(wait + spread), counts_as_attempt=False)
    if klass is RetryClass.TERMINAL:
        return RetryDecision(False, stopped_by="terminal")
    if attempt >= policy.attempts:
        return RetryDecision(False, stopped_by="attempts-exhausted")
    if klass is RetryClass.RETRY_AFTER and stated is not None:
        wait = min(round(float(stated) * 1000), policy.max_delay_ms)
        return RetryDecision(True, wait)
    return RetryDecision(True, backoff_delay_ms(policy, attempt, rng=rng))


def _stated_seconds(meta: object) -> float | None:
    """A usable stated delay, or None: one that is non-finite, negative or
    longer than 36500 days is ignored (the backoff applies), so a wait never
    overflows the database's timestamps."""
    if not isinstance(meta, dict):
        return None
    value = meta.get("retry_after_seconds")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    usable = math.isfinite(seconds) and 0 <= seconds * 1000 <= MAX_DURATION_MS
    return seconds if usable else None
