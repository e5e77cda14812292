"""Turn a ``postgresql://`` URL into a Django ``DATABASES`` entry.

A small helper for settings modules (the example project and the test suite
use it) so that ``DATABASE_URL`` works without another dependency. Query
parameters such as ``host=/run/postgresql`` (a Unix socket directory) or
``sslmode=require`` are passed to psycopg as connection options.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["database_from_url"]

_SCHEMES = {"postgres", "postgresql", "pgsql"}


def database_from_url(url: str, **extra: Any) -> dict[str, Any]:
    """Return a ``DATABASES`` entry for ``url``.

    Args:
        url: ``postgresql://user:password@host:port/name?option=value``.
        **extra: keys merged into the entry (``CONN_MAX_AGE``, ``TEST``...).

    Raises:
        ValueError: the URL is not a PostgreSQL URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ValueError(
            f"DATABASE_URL must start with postgresql://, not {parts.scheme!r}://"
        )
    options = dict(parse_qsl(parts.query))
    host = options.pop("host", None) or unquote(parts.hostname or "")
    port = options.pop("port", None) or parts.port
    entry: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(port or ""),
        "OPTIONS": options,
    }
    entry.update(extra)
    return entry
