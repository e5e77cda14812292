"""The Redis driver's ``ULTIMATE_JOBS`` keys (``RedisDriver.settings_keys``).

``REDIS_URL`` and ``REDIS_PREFIX`` say where the jobs are; ``REDIS_SENTINELS``
with ``REDIS_SENTINEL_SERVICE`` find the primary through Redis Sentinel
(a failover moves the driver to the new primary); ``REDIS_WAIT_REPLICAS``
with ``REDIS_WAIT_TIMEOUT`` follow every script with ``WAIT``, so what a
failover can lose is what the docs (docs/howto/redis.md) say it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from ...errors import SettingsInvalid

if TYPE_CHECKING:
    from ...conf import Kind

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_URL",
    "DEFAULT_WAIT_TIMEOUT_MS",
    "settings_keys",
]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "uj"
DEFAULT_WAIT_TIMEOUT_MS = 1_000
MAX_WAIT_REPLICAS = 16


def _invalid(key: str, must: str, example: str, value: Any = None) -> SettingsInvalid:
    got = "" if value is None else f", got {value!r:.80}"
    return SettingsInvalid(
        f"ULTIMATE_JOBS[{key!r}] must be {must}{got}",
        fix=f'ULTIMATE_JOBS["{key}"] = {example}',
        meta={"key": key},
    )


def _url(key: str, value: Any) -> Any:
    must = "a redis://, rediss:// or unix:// URL"
    if not isinstance(value, str) or not value.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        raise _invalid(key, must, f'"{DEFAULT_URL}"')
    # What redis-py would refuse only at the first connection: a port that
    # is no port, a database that is no number, a socket without a path, a
    # query option it cannot read.
    if not _well_formed(value):
        raise _invalid(
            key,
            f"{must} with a host, a port from 1 to 65535, a database number "
            "(redis://host:6379/0) and query options redis-py reads",
            f'"{DEFAULT_URL}"',
            _masked(value),
        )
    return value


def _well_formed(url: str) -> bool:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme == "unix":
        if not parts.path:
            return False
    else:
        db = parts.path.lstrip("/")
        if not parts.hostname or (port is not None and not 0 < port < 65536):
            return False
        if db and not db.isdigit():
            return False
        if db and "db" in parse_qs(parts.query):
            return False  # two databases named: say which, once
    try:
        from redis.connection import parse_url
    except ImportError:  # no client: the driver says so when it is built
        return True
    try:
        options = parse_url(url)
    except (ValueError, TypeError):
        return False
    return isinstance(options.get("db", 0), int)


def _masked(url: str) -> str:
    """``url`` without its credentials or query (the refusal quotes the rest)."""
    scheme, _, rest = url.partition("://")
    rest = rest.partition("?")[0].partition("#")[0]
    _, at, place = rest.rpartition("@")
    return f"{scheme}://***@{place}" if at else url.partition("?")[0]


def _prefix(key: str, value: Any) -> Any:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > 64
        or any(c in value for c in "{}: \n")
    ):
        raise _invalid(
            key,
            "1 to 64 characters without braces, colons or spaces",
            f'"{DEFAULT_PREFIX}"',
        )
    return value


def _sentinel(text: Any) -> tuple[str, int] | None:
    if not isinstance(text, str):
        return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def _sentinels(key: str, value: Any) -> Any:
    parsed = (
        [_sentinel(v) for v in value]
        if isinstance(value, list | tuple) and value
        else [None]
    )
    if None in parsed:
        raise _invalid(
            key,
            "a non-empty list of host:port strings",
            '["10.0.0.1:26379", "10.0.0.2:26379"]',
            value,
        )
    return tuple(parsed)


def _service(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise _invalid(key, "the Sentinels' name of the primary", '"mymaster"', value)
    return value


def _replicas(key: str, value: Any) -> Any:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_WAIT_REPLICAS
    ):
        raise _invalid(key, f"a whole number from 0 to {MAX_WAIT_REPLICAS}", "1", value)
    return value


def settings_keys() -> dict[str, Kind]:
    """The keys, each with how it is checked."""
    from ...conf import SETTINGS, Kind

    duration = SETTINGS["VISIBILITY_TIMEOUT"][0].parse
    return {
        "REDIS_URL": Kind("a redis://, rediss:// or unix:// URL", _url),
        "REDIS_PREFIX": Kind("a key prefix without braces or colons", _prefix),
        "REDIS_SENTINELS": Kind("a non-empty list of host:port strings", _sentinels),
        "REDIS_SENTINEL_SERVICE": Kind("the Sentinels' name of the primary", _service),
        "REDIS_WAIT_REPLICAS": Kind(
            f"a whole number from 0 to {MAX_WAIT_REPLICAS}", _replicas
        ),
        "REDIS_WAIT_TIMEOUT": Kind("a duration", duration),
    }
