"""The ``ULTIMATE_JOBS["LIMITS"]`` setting: its parsed form and its checks.

Part of the settings schema (``conf.py`` reads it), kept apart because it
is a small language of its own. The worker's in-process limiter
(``worker/limits.py``) enforces what this describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .durations import is_count, parse_duration_ms
from .errors import DurationInvalid, SettingsInvalid
from .validation import name_problem

__all__ = ["LimitConfig", "RateLimit", "parse_limits"]

_KEYS = ("per_tenant", "per_queue", "global", "rate_per_tenant")


@dataclass(frozen=True, kw_only=True, slots=True)
class RateLimit:
    """At most ``limit`` starts per tenant in any ``window_ms``."""

    limit: int
    window_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitConfig:
    """Parsed ``ULTIMATE_JOBS["LIMITS"]``; ``None`` means no limit."""

    per_tenant: int | None = None
    per_queue: int | None = None
    """The limit of every queue not named in ``queues``."""
    queues: Mapping[str, int] = field(default_factory=dict)
    """Per named queue (overrides ``per_queue``)."""
    total: int | None = None
    """The ``"global"`` key: attempts held by this process in all."""
    rate_per_tenant: RateLimit | None = None

    def __post_init__(self) -> None:
        # Built by code (a test, WorkerConfig) as well as by parse_limits:
        # the same refusal either way, before any worker starts.
        for name in ("per_tenant", "per_queue", "total"):
            _optional(f"limits {name}", getattr(self, name))
        for queue, limit in self.queues.items():
            _queue_name("limits queues", queue)
            _limit(f"limits queues[{queue!r}]", limit)
        rate = self.rate_per_tenant
        if rate is not None:
            _limit("limits rate_per_tenant.limit", rate.limit)
            if not is_count(rate.window_ms):
                raise SettingsInvalid(
                    f"limits rate_per_tenant.window_ms must be at least 1, "
                    f"got {rate.window_ms!r:.80}"
                )

    @property
    def active(self) -> bool:
        """Whether any limit is set (a worker without one skips the limiter)."""
        return (
            self.per_tenant is not None
            or self.per_queue is not None
            or bool(self.queues)
            or self.total is not None
            or self.rate_per_tenant is not None
        )

    def queue_limit(self, queue: str) -> int | None:
        """The limit of ``queue`` (``None``: unlimited)."""
        return self.queues.get(queue, self.per_queue)


def parse_limits(key: str, value: Any) -> LimitConfig:
    """Validate ``ULTIMATE_JOBS[key]`` (the LIMITS dict).

    Raises:
        SettingsInvalid: an unknown key, or a number that is not a whole,
            finite count of at least 0, or a bad rate window.
    """
    where = f"ULTIMATE_JOBS[{key!r}]"
    if not isinstance(value, Mapping):
        raise SettingsInvalid(f"{where} must be a dict of limits, got {value!r:.80}")
    unknown = sorted(set(value) - set(_KEYS), key=str)
    if unknown:
        raise SettingsInvalid(
            f"{where} has unknown keys: {unknown!r} (known: {list(_KEYS)})"
        )
    per_queue = value.get("per_queue")
    queues: dict[str, int] = {}
    if isinstance(per_queue, Mapping):
        for name, limit in per_queue.items():
            _queue_name(f"{where}['per_queue']", name)
            queues[name] = _limit(f"{where}['per_queue'][{name!r}]", limit)
        per_queue = None
    return LimitConfig(
        per_tenant=_optional(f"{where}['per_tenant']", value.get("per_tenant")),
        per_queue=_optional(f"{where}['per_queue']", per_queue),
        queues=queues,
        total=_optional(f"{where}['global']", value.get("global")),
        rate_per_tenant=_rate(
            f"{where}['rate_per_tenant']", value.get("rate_per_tenant")
        ),
    )


def _queue_name(where: str, name: Any) -> None:
    # The queue-name rule every queue is held to (QUEUES, runjobs --queues):
    # a typo'd or unstorable name would otherwise limit no queue, silently.
    problem = name_problem(name)
    if problem is not None:
        raise SettingsInvalid(f"{where} keys are queue names: {name!r:.80} {problem}")


def _limit(where: str, value: Any) -> int:
    # Finite and >= 0: NaN or infinity from an environment variable would
    # silently mean "no limit".
    if not is_count(value, minimum=0):
        raise SettingsInvalid(
            f"{where} must be a whole number of at least 0, got {value!r:.80}"
        )
    return int(value)


def _optional(where: str, value: Any) -> int | None:
    return None if value is None else _limit(where, value)


def _rate(where: str, value: Any) -> RateLimit | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"limit", "window"}:
        raise SettingsInvalid(
            f'{where} must be {{"limit": <count>, "window": <duration>}}, '
            f"got {value!r:.80}"
        )
    try:
        window_ms = parse_duration_ms(value["window"], what=f"{where}['window']")
    except DurationInvalid as error:
        raise SettingsInvalid(error.cause) from error
    return RateLimit(
        limit=_limit(f"{where}['limit']", value["limit"]), window_ms=window_ms
    )
