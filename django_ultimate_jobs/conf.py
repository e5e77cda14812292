"""The one place that reads settings: ``ULTIMATE_JOBS = {...}``.

Read lazily (never at import), parsed once into a frozen dataclass, and
re-read when tests change settings (``setting_changed``). Unknown keys and
invalid values are refused with ``X_SETTINGS_INVALID``; the system checks
call :func:`jobs_settings` so a bad setting fails ``manage.py check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .durations import is_count, parse_duration_ms
from .errors import DurationInvalid, SettingsInvalid

__all__ = ["DEFAULT_HOUSEKEEPING_QUEUE", "JobsSettings", "jobs_settings"]

DEFAULT_HOUSEKEEPING_QUEUE = "ultimate_jobs"
"""The queue of the built-in jobs (retention, partitions) unless set."""
_DEFAULT_REDACT = ("password", "secret", "token", "api_key", "authorization")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobsSettings:
    """Parsed ``ULTIMATE_JOBS`` (every key documented in docs/reference/settings.md)."""

    driver: str = "postgres"
    database: str = "default"
    queues: tuple[str, ...] = ("default",)
    housekeeping_queue: str = DEFAULT_HOUSEKEEPING_QUEUE
    concurrency: int = 8
    visibility_timeout_ms: int = 30_000
    heartbeat_interval_ms: int = 10_000
    poll_interval_ms: int = 250
    idle_poll_max_ms: int = 2_000
    woken_idle_poll_max_ms: int = 5_000
    claim_batch: int = 64
    shutdown_deadline_ms: int = 25_000
    stuck_slots_max: int = 4
    wake: bool = True
    prepare: bool = True
    unknown_job_park_ms: int = 30_000
    redact_keys: tuple[str, ...] = field(default=_DEFAULT_REDACT)
    retention_done_ms: int = 86_400_000
    retention_failed_ms: int = 14 * 86_400_000
    partition_lock_timeout_ms: int = 5_000


_DURATION_KEYS = {
    "VISIBILITY_TIMEOUT": "visibility_timeout_ms",
    "HEARTBEAT_INTERVAL": "heartbeat_interval_ms",
    "POLL_INTERVAL": "poll_interval_ms",
    "IDLE_POLL_MAX": "idle_poll_max_ms",
    "WOKEN_IDLE_POLL_MAX": "woken_idle_poll_max_ms",
    "SHUTDOWN_DEADLINE": "shutdown_deadline_ms",
    "UNKNOWN_JOB_PARK": "unknown_job_park_ms",
    "PARTITION_LOCK_TIMEOUT": "partition_lock_timeout_ms",
}
_COUNT_KEYS = {
    "CONCURRENCY": "concurrency",
    "CLAIM_BATCH": "claim_batch",
    "STUCK_SLOTS_MAX": "stuck_slots_max",
}
_OTHER_KEYS = {
    "DRIVER",
    "DATABASE",
    "QUEUES",
    "HOUSEKEEPING_QUEUE",
    "WAKE",
    "PREPARE",
    "REDACT_KEYS",
    "RETENTION",
}
# RETENTION["<key>"]: how long finished rows of each kind are kept.
_RETENTION_KEYS = {"done": "retention_done_ms", "failed": "retention_failed_ms"}
_DRIVERS = {"postgres", "memory"}


def parse_settings(raw: Mapping[str, Any]) -> JobsSettings:
    """Validate ``raw`` (the ``ULTIMATE_JOBS`` dict) and return the parsed form.

    Raises:
        SettingsInvalid: an unknown key, or a value of the wrong kind.
    """
    known = set(_DURATION_KEYS) | set(_COUNT_KEYS) | _OTHER_KEYS
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS has unknown keys: {', '.join(unknown)}",
            meta={"unknown": unknown},
        )
    values: dict[str, Any] = {}
    for key, attr in _DURATION_KEYS.items():
        if key in raw:
            values[attr] = _duration(f"ULTIMATE_JOBS[{key!r}]", raw[key])
    for key, attr in _COUNT_KEYS.items():
        if key in raw:
            values[attr] = _count(key, raw[key])
    if "DRIVER" in raw:
        if raw["DRIVER"] not in _DRIVERS:
            raise SettingsInvalid(
                f"ULTIMATE_JOBS['DRIVER'] must be one of {sorted(_DRIVERS)}"
            )
        values["driver"] = raw["DRIVER"]
    if "DATABASE" in raw:
        if not isinstance(raw["DATABASE"], str) or not raw["DATABASE"]:
            raise SettingsInvalid("ULTIMATE_JOBS['DATABASE'] must be a DATABASES alias")
        values["database"] = raw["DATABASE"]
    if "QUEUES" in raw:
        values["queues"] = _names("QUEUES", raw["QUEUES"])
        if not values["queues"]:
            raise SettingsInvalid(
                "ULTIMATE_JOBS['QUEUES'] must name at least one queue"
            )
    if "HOUSEKEEPING_QUEUE" in raw:
        values["housekeeping_queue"] = _queue_name(
            "HOUSEKEEPING_QUEUE", raw["HOUSEKEEPING_QUEUE"]
        )
    for key in ("WAKE", "PREPARE"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise SettingsInvalid(f"ULTIMATE_JOBS[{key!r}] must be True or False")
            values[key.lower()] = raw[key]
    if "REDACT_KEYS" in raw:
        values["redact_keys"] = _names("REDACT_KEYS", raw["REDACT_KEYS"])
    if "RETENTION" in raw:
        values.update(_retention(raw["RETENTION"]))
    if "HEARTBEAT_INTERVAL" not in raw and "visibility_timeout_ms" in values:
        values["heartbeat_interval_ms"] = values["visibility_timeout_ms"] // 3
    parsed = JobsSettings(**values)
    if parsed.heartbeat_interval_ms >= parsed.visibility_timeout_ms:
        raise SettingsInvalid(
            "ULTIMATE_JOBS['HEARTBEAT_INTERVAL'] must be shorter than "
            "VISIBILITY_TIMEOUT, or every lease lapses between renewals"
        )
    return parsed


def _retention(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise SettingsInvalid(
            'ULTIMATE_JOBS["RETENTION"] must be a dict like {"done": "1d", "failed": "14d"}'
        )
    unknown = sorted(set(value) - set(_RETENTION_KEYS), key=str)
    if unknown:
        raise SettingsInvalid(
            f'ULTIMATE_JOBS["RETENTION"] has unknown keys: {unknown!r} '
            f"(known: {sorted(_RETENTION_KEYS)})"
        )
    return {
        attr: _duration(f'ULTIMATE_JOBS["RETENTION"][{key!r}]', value[key])
        for key, attr in _RETENTION_KEYS.items()
        if key in value
    }


def _duration(what: str, value: Any) -> int:
    try:
        return parse_duration_ms(value, what=what)
    except DurationInvalid as error:
        raise SettingsInvalid(error.cause) from error


def _count(key: str, value: Any) -> int:
    if not is_count(value):
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}] must be a whole number of at least 1, got {value!r}"
        )
    return int(value)


def _names(key: str, value: Any) -> tuple[str, ...]:
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, list | tuple)
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise SettingsInvalid(f"ULTIMATE_JOBS[{key!r}] must be a list of names")
    return tuple(value)


def _queue_name(key: str, value: Any) -> str:
    # The rules of @job(queue=...): a name a job could be declared with.
    if (
        not isinstance(value, str)
        or not value
        or value != value.strip()
        or len(value) > 200
        or not value.isprintable()
    ):
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}] must be a queue name: a non-empty string of at "
            "most 200 printable characters, without surrounding spaces"
        )
    return value


@cache
def jobs_settings() -> JobsSettings:
    """Return the parsed settings (cached; reset when settings change)."""
    from django.conf import settings

    return parse_settings(getattr(settings, "ULTIMATE_JOBS", {}) or {})


def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "ULTIMATE_JOBS":
        from .drivers import reset_driver

        jobs_settings.cache_clear()
        reset_driver()


def connect_setting_changed() -> None:
    """Re-read the settings when a test overrides them."""
    from django.core.signals import setting_changed

    setting_changed.connect(_reset, dispatch_uid="ultimate_jobs_settings")
