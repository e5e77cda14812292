"""The one place that reads settings: ``ULTIMATE_JOBS = {...}``.

Read lazily (never at import), parsed once into a frozen dataclass, and
re-read when tests change settings (``setting_changed``). Unknown keys and
invalid values are refused with ``X_SETTINGS_INVALID``; the system checks
call :func:`jobs_settings` so a bad setting fails ``manage.py check``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.util import find_spec
from typing import Any

from .durations import is_count, parse_duration_ms
from .errors import DurationInvalid, SettingsInvalid
from .limitconfig import LimitConfig, parse_limits
from .validation import NAME_RULE, name_problem

__all__ = [
    "DEFAULT_HOUSEKEEPING_QUEUE",
    "MAX_CLAIM_BATCH",
    "MAX_CONCURRENCY",
    "SETTINGS",
    "DriverKeys",
    "JobsSettings",
    "Kind",
    "jobs_settings",
    "parse_settings",
    "use_driver_keys",
]

DEFAULT_DRIVER = "postgres"
DEFAULT_HOUSEKEEPING_QUEUE = "ultimate_jobs"
"""The queue of the built-in jobs (retention, partitions) unless set."""
MAX_CONCURRENCY = 1000
"""The most slot threads one worker process runs; more parallelism is more
processes (``--processes``) or more hosts, each holding its own connections."""
MAX_CLAIM_BATCH = 1000
"""The most jobs one claim statement takes (as many as a bulk verb touches)."""
MIN_TOKEN_LENGTH = 16
"""The shortest ``METRICS_TOKEN`` accepted: a guessable one protects nothing."""
_DEFAULT_REDACT = ("password", "secret", "token", "api_key", "authorization")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobsSettings:
    """Parsed ``ULTIMATE_JOBS`` (every key documented in docs/reference/settings.md)."""

    driver: str = DEFAULT_DRIVER
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
    burst_connect_wait_ms: int = 30_000
    stuck_slots_max: int = 4
    wake: bool = True
    prepare: bool = True
    unknown_job_park_ms: int = 30_000
    redact_keys: tuple[str, ...] = field(default=_DEFAULT_REDACT)
    retention_done_ms: int = 86_400_000
    retention_failed_ms: int = 14 * 86_400_000
    partition_lock_timeout_ms: int = 5_000
    outbox: bool | str = False
    """``False``, ``True`` or ``"required"`` (see :mod:`django_ultimate_jobs.outbox`)."""
    outbox_database: str = "default"
    outbox_claim_lease_ms: int = 30_000
    outbox_sweep_max_ms: int = 30_000
    limits: LimitConfig = field(default_factory=LimitConfig)
    # Webhooks (django_ultimate_jobs.webhooks).
    webhook_allow_networks: tuple[Any, ...] = ()
    """Networks (``ipaddress`` objects) the sender may reach although not public."""
    webhook_allow_http: bool = False
    webhook_disable_after: int = 10
    webhook_timeout_ms: int = 10_000
    webhook_connect_timeout_ms: int = 3_000
    webhook_retention_ms: int = 30 * 86_400_000
    webhook_secret_overlap_ms: int = 86_400_000
    tracing: bool | str = "auto"
    """``"auto"``, ``True`` or ``False`` (see :mod:`django_ultimate_jobs.tracing`)."""
    # Metrics (django_ultimate_jobs.metrics).
    metrics_interval_ms: int = 15_000
    """How old the fleet's shared queue snapshot may be before a scrape reads
    the queues again (at most one read per interval, fleet-wide)."""
    metrics_token: str | None = None
    """The bearer token the metrics view accepts (None: staff users only)."""
    driver_options: Mapping[str, Any] = field(default_factory=dict)
    """The keys the driver class declares (``BaseDriver.settings_keys``),
    parsed: read by its ``from_settings``."""


# RETENTION["<name>"]: how long finished rows of each kind are kept.
_RETENTION_KEYS = {"done": "retention_done_ms", "failed": "retention_failed_ms"}
_DRIVER_ALIASES = ("postgres", "memory", "redis")


def _ms(what: str, value: Any) -> int:
    try:
        return parse_duration_ms(value, what=what)
    except DurationInvalid as error:
        raise SettingsInvalid(error.cause) from error


def _duration(key: str, value: Any) -> Any:
    return _ms(f"ULTIMATE_JOBS[{key!r}]", value)


def _count(key: str, value: Any) -> Any:
    if not is_count(value):
        raise _refused(key, value)
    return int(value)


def _up_to(maximum: int) -> Callable[[str, Any], Any]:
    def parse(key: str, value: Any) -> Any:
        if not is_count(value) or value > maximum:
            raise _refused(key, value)
        return int(value)

    return parse


def _flag(key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise _refused(key, value)
    return value


def _names(key: str, value: Any) -> Any:
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, list | tuple)
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise _refused(key, value)
    return tuple(value)


def _queues(key: str, value: Any) -> Any:
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, list | tuple)
        or not value
    ):
        raise _refused(key, value)
    for index, name in enumerate(value):
        _queue_name(key, name, where=f"ULTIMATE_JOBS[{key!r}][{index}]")
    return tuple(value)


def _queue_name(key: str, value: Any, *, where: str | None = None) -> Any:
    # The rule of @job(queue=...): a name a job could be declared with.
    problem = name_problem(value)
    if problem is not None:
        raise SettingsInvalid(
            f"{where or f'ULTIMATE_JOBS[{key!r}]'} {problem}, got {value!r:.80}",
            fix=f"write each queue name in ULTIMATE_JOBS[{key!r}] as {NAME_RULE}",
        )
    return value


def _alias(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise _refused(key, value)
    return value


def _outbox(key: str, value: Any) -> Any:
    if not (isinstance(value, bool) or value == "required"):
        raise _refused(key, value)
    return value


def _tracing(key: str, value: Any) -> Any:
    if not (isinstance(value, bool) or value == "auto"):
        raise _refused(key, value)
    # Asked only for True: "auto" must import nothing, and finding a
    # submodule imports its package.
    if value is True and not _importable("opentelemetry.trace"):
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}] is True but OpenTelemetry is not installed",
            fix="pip install 'django-ultimate-jobs[otel]', or set it to \"auto\"",
        )
    return value


def _importable(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ImportError:  # its package is missing (or blocked)
        return False


def _driver(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise _refused(key, value)
    if _driver_keys is not None:
        # Loads the class: a name that is no driver fails here, at check time.
        _driver_keys(value)
    return value


def _retention(key: str, value: Any) -> Any:
    if not isinstance(value, Mapping):
        raise _refused(key, value)
    unknown = sorted(set(value) - set(_RETENTION_KEYS), key=str)
    if unknown:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}] has unknown keys: {unknown!r} "
            f"(known: {sorted(_RETENTION_KEYS)})"
        )
    return {
        attr: _ms(f"ULTIMATE_JOBS[{key!r}][{name!r}]", value[name])
        for name, attr in _RETENTION_KEYS.items()
        if name in value
    }


def _token(key: str, value: Any) -> Any:
    if value is not None and (
        not isinstance(value, str) or len(value) < MIN_TOKEN_LENGTH
    ):
        raise _refused(key, value if not isinstance(value, str) else "<a short token>")
    return value


NETWORKS_FIX = (
    'write networks as "127.0.0.0/8", "10.1.2.0/24" or "::1/128" (host bits zero)'
)
"""How to write what :func:`parse_networks` takes."""


class NetworksInvalid(ValueError):
    """What :func:`parse_networks` refused: ``index`` None for the whole
    value (not a list), else the entry at ``index``."""

    def __init__(self, index: int | None, entry: Any) -> None:
        super().__init__(index, entry)
        self.index = index
        self.entry = entry


def parse_networks(
    value: Any,
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A list of networks (``"10.0.0.0/8"`` strings or :mod:`ipaddress`
    networks) as networks: ``WEBHOOK_ALLOW_NETWORKS`` and a webhook's
    ``allow_networks`` take the same.

    Raises:
        NetworksInvalid: not a list, or an entry that is not a network (host
            bits set included).
    """
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise NetworksInvalid(None, value)
    parsed = []
    for index, entry in enumerate(value):
        if not isinstance(entry, str | ipaddress.IPv4Network | ipaddress.IPv6Network):
            raise NetworksInvalid(index, entry)
        try:
            parsed.append(ipaddress.ip_network(entry))
        except ValueError:
            raise NetworksInvalid(index, entry) from None
    return tuple(parsed)


def _networks(key: str, value: Any) -> Any:
    try:
        return parse_networks(value)
    except NetworksInvalid as refused:
        if refused.index is None:
            raise _refused(key, value) from None
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}][{refused.index}] is not a network, got "
            f"{refused.entry!r:.80}",
            fix=NETWORKS_FIX,
        ) from None


def _refused(key: str, value: Any) -> SettingsInvalid:
    return SettingsInvalid(
        f"ULTIMATE_JOBS[{key!r}] must be {SETTINGS[key][0].expects}, got {value!r:.80}"
    )


@dataclass(frozen=True, slots=True)
class Kind:
    """How one kind of setting is checked.

    ``expects`` finishes "ULTIMATE_JOBS[KEY] must be ..." in the error, and
    starts the key's "Validated by" cell in docs/reference/settings.md (a
    docs test holds them together).
    """

    expects: str
    parse: Callable[[str, Any], Any]


_DURATION = Kind("a duration", _duration)
_COUNT = Kind("a whole number of at least 1", _count)
_FLAG = Kind("True or False", _flag)
_NAMES = Kind("a list of non-empty strings", _names)
_QUEUES = Kind("a non-empty list of queue names", _queues)
_QUEUE = Kind(f"a queue name: {NAME_RULE}", _queue_name)
_CONCURRENCY = Kind(
    f"a whole number from 1 to {MAX_CONCURRENCY}", _up_to(MAX_CONCURRENCY)
)
_CLAIM_BATCH = Kind(
    f"a whole number from 1 to {MAX_CLAIM_BATCH}", _up_to(MAX_CLAIM_BATCH)
)
_ALIAS = Kind("a non-empty string naming a DATABASES alias", _alias)
_DRIVER = Kind(
    ", ".join(f'"{name}"' for name in _DRIVER_ALIASES)
    + " or the dotted path of a driver class",
    _driver,
)
_OUTBOX = Kind('True, False or "required"', _outbox)
_TRACING = Kind('"auto", True or False', _tracing)
_RETENTION = Kind('a dict of "done" and/or "failed" durations', _retention)
_NETWORKS = Kind('a list of networks such as "10.0.0.0/8"', _networks)
_TOKEN = Kind(f"None or a string of at least {MIN_TOKEN_LENGTH} characters", _token)
_LIMITS = Kind(
    'a dict of "per_tenant", "per_queue", "global" and/or "rate_per_tenant"',
    parse_limits,
)

SETTINGS: dict[str, tuple[Kind, str]] = {
    "DRIVER": (_DRIVER, "driver"),
    "DATABASE": (_ALIAS, "database"),
    "QUEUES": (_QUEUES, "queues"),
    "HOUSEKEEPING_QUEUE": (_QUEUE, "housekeeping_queue"),
    "CONCURRENCY": (_CONCURRENCY, "concurrency"),
    "VISIBILITY_TIMEOUT": (_DURATION, "visibility_timeout_ms"),
    "HEARTBEAT_INTERVAL": (_DURATION, "heartbeat_interval_ms"),
    "POLL_INTERVAL": (_DURATION, "poll_interval_ms"),
    "IDLE_POLL_MAX": (_DURATION, "idle_poll_max_ms"),
    "WOKEN_IDLE_POLL_MAX": (_DURATION, "woken_idle_poll_max_ms"),
    "CLAIM_BATCH": (_CLAIM_BATCH, "claim_batch"),
    "SHUTDOWN_DEADLINE": (_DURATION, "shutdown_deadline_ms"),
    "BURST_CONNECT_WAIT": (_DURATION, "burst_connect_wait_ms"),
    "STUCK_SLOTS_MAX": (_COUNT, "stuck_slots_max"),
    "WAKE": (_FLAG, "wake"),
    "PREPARE": (_FLAG, "prepare"),
    "UNKNOWN_JOB_PARK": (_DURATION, "unknown_job_park_ms"),
    "RETENTION": (_RETENTION, ""),  # fills retention_done_ms, retention_failed_ms
    "PARTITION_LOCK_TIMEOUT": (_DURATION, "partition_lock_timeout_ms"),
    "REDACT_KEYS": (_NAMES, "redact_keys"),
    "OUTBOX": (_OUTBOX, "outbox"),
    "OUTBOX_DATABASE": (_ALIAS, "outbox_database"),
    "OUTBOX_CLAIM_LEASE": (_DURATION, "outbox_claim_lease_ms"),
    "OUTBOX_SWEEP_MAX": (_DURATION, "outbox_sweep_max_ms"),
    "LIMITS": (_LIMITS, "limits"),
    "WEBHOOK_ALLOW_NETWORKS": (_NETWORKS, "webhook_allow_networks"),
    "WEBHOOK_ALLOW_HTTP": (_FLAG, "webhook_allow_http"),
    "WEBHOOK_DISABLE_AFTER": (_COUNT, "webhook_disable_after"),
    "WEBHOOK_TIMEOUT": (_DURATION, "webhook_timeout_ms"),
    "WEBHOOK_CONNECT_TIMEOUT": (_DURATION, "webhook_connect_timeout_ms"),
    "WEBHOOK_RETENTION": (_DURATION, "webhook_retention_ms"),
    "WEBHOOK_SECRET_OVERLAP": (_DURATION, "webhook_secret_overlap_ms"),
    "TRACING": (_TRACING, "tracing"),
    "METRICS_INTERVAL": (_DURATION, "metrics_interval_ms"),
    "METRICS_TOKEN": (_TOKEN, "metrics_token"),
}
"""Every ``ULTIMATE_JOBS`` key: its kind and the JobsSettings field it sets."""


def parse_setting(key: str, value: Any) -> dict[str, Any]:
    """Validate one ``ULTIMATE_JOBS`` entry: the JobsSettings fields it sets.

    Raises:
        SettingsInvalid: ``key`` is unknown, or ``value`` is not of its kind.
    """
    if key not in SETTINGS:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS has unknown keys: {key}", meta={"unknown": [key]}
        )
    kind, attr = SETTINGS[key]
    parsed = kind.parse(key, value)
    return parsed if not attr else {attr: parsed}


DriverKeys = Callable[[str], Mapping[str, Kind]]
"""Driver name -> the ``ULTIMATE_JOBS`` keys its class declares."""

_driver_keys: DriverKeys | None = None


def use_driver_keys(lookup: DriverKeys) -> None:
    """Let settings accept the keys a driver class declares.

    Installed by :mod:`django_ultimate_jobs.drivers` when it is imported
    (this module sits below the drivers and does not import them). Until
    then a driver's own keys are refused as unknown, and ``DRIVER`` is
    checked for its shape only (the class is loaded at first use).
    """
    global _driver_keys
    _driver_keys = lookup


def _parse_driver_key(kind: Kind, key: str, value: Any) -> Any:
    """A driver's own key, parsed by its ``Kind``: any failure is refused.

    A ``parse`` should raise :class:`SettingsInvalid`; one that raises
    anything else (``int("x")``'s ValueError) still gets the coded error.
    """
    try:
        return kind.parse(key, value)
    except SettingsInvalid:
        raise
    except Exception as error:  # (a driver's parse function)
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}] must be {kind.expects}, got {value!r:.80} "
            f"({type(error).__name__}: {error})",
            meta={"key": key},
        ) from error


def parse_settings(raw: Mapping[str, Any]) -> JobsSettings:
    """Validate ``raw`` (the ``ULTIMATE_JOBS`` dict) and return the parsed form.

    Raises:
        SettingsInvalid: an unknown key, a value of the wrong kind, or a
            ``DRIVER`` that names no driver class.
    """
    unknown = sorted(set(raw) - set(SETTINGS))
    declared: Mapping[str, Kind] = {}
    if unknown and _driver_keys is not None:
        values = parse_setting("DRIVER", raw.get("DRIVER", DEFAULT_DRIVER))
        declared = _driver_keys(values["driver"])
        unknown = [key for key in unknown if key not in declared]
    if unknown:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS has unknown keys: {', '.join(unknown)}",
            meta={"unknown": unknown},
        )
    values = {}
    options: dict[str, Any] = {}
    for key, value in raw.items():
        if key in declared:
            options[key] = _parse_driver_key(declared[key], key, value)
        else:
            values.update(parse_setting(key, value))
    if options:
        values["driver_options"] = options
    if "HEARTBEAT_INTERVAL" not in raw and "visibility_timeout_ms" in values:
        values["heartbeat_interval_ms"] = values["visibility_timeout_ms"] // 3
    parsed = JobsSettings(**values)
    if parsed.heartbeat_interval_ms >= parsed.visibility_timeout_ms:
        raise SettingsInvalid(
            "ULTIMATE_JOBS['HEARTBEAT_INTERVAL'] must be shorter than "
            "VISIBILITY_TIMEOUT, or every lease lapses between renewals"
        )
    return parsed


@cache
def jobs_settings() -> JobsSettings:
    """Return the parsed settings (cached; reset when settings change)."""
    from django.conf import settings

    return parse_settings(getattr(settings, "ULTIMATE_JOBS", {}) or {})


def _reset(*, setting: str, **kwargs: Any) -> None:
    # The driver built from the old settings is reset by drivers/ (its own
    # receiver): this module sits below the drivers.
    if setting == "ULTIMATE_JOBS":
        jobs_settings.cache_clear()


def connect_setting_changed() -> None:
    """Re-read the settings when a test overrides them."""
    from django.core.signals import setting_changed

    setting_changed.connect(_reset, dispatch_uid="ultimate_jobs_settings")
