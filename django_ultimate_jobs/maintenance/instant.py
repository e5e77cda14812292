"""One clock reading for a maintenance pass."""

from __future__ import annotations

from datetime import UTC, datetime

from ..drivers import get_driver
from ..errors import JobInputInvalid

__all__ = ["maintenance_now", "parse_instant", "require_aware"]


def maintenance_now() -> datetime:
    """The store's time (``driver.now()``): a test's frozen instant, else the
    database's ``now()``.

    Read once per pass and handed to every target, so one pass never
    compares some rows against one clock and some against another.
    """
    return get_driver().now()


def parse_instant(text: str) -> datetime:
    """An ISO 8601 date or instant; without an offset it is read as UTC.

    Raises:
        ValueError: ``text`` is not ISO 8601.
    """
    instant = datetime.fromisoformat(text)
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def require_aware(instant: datetime | None, what: str = "now") -> None:
    """Refuse a naive datetime: which day it falls on would depend on the host.

    Raises:
        JobInputInvalid: ``instant`` is not a timezone-aware datetime.
    """
    if instant is None:
        return
    if not isinstance(instant, datetime) or instant.utcoffset() is None:
        raise JobInputInvalid(
            f"{what} must be a timezone-aware datetime, got {instant!r}"
        )
