"""``publish_event()``: wake the runs waiting for an event.

Inside ``transaction.atomic()`` the event commits or rolls back with the
caller's transaction (it is written on the same connection); a rolled-back
publish matches nothing. The publish wakes parked waiters in the same
statement and again at commit.
"""

from __future__ import annotations

from typing import Any

from .drivers import get_driver
from .drivers.steps_base import EventRecord
from .durations import DurationInput, parse_duration_ms
from .errors import JobInputInvalid, JobsError
from .validation import dump_input

__all__ = ["publish_event", "purge_expired_events"]

DEFAULT_TTL: DurationInput = "7d"


def publish_event(
    name: str,
    payload: Any = None,
    key: str | None = None,
    ttl: DurationInput = DEFAULT_TTL,
) -> EventRecord:
    """Publish ``name`` with a JSON ``payload`` for waits on it (and on ``key``).

    Args:
        name: the event name waits ask for.
        payload: JSON-safe data handed to the waiting step.
        key: the correlation key: a wait with a key only takes events with
            that key; a wait without one takes any.
        ttl: how long the event stays matchable.

    Raises:
        JobInputInvalid: a bad name, key, ttl or payload; nothing written.
    """
    if not isinstance(name, str) or not name or len(name) > 200:
        raise JobInputInvalid("an event name must be a string of 1 to 200 characters")
    if key is not None and (not isinstance(key, str) or not key or "\x00" in key):
        raise JobInputInvalid("an event key must be a non-empty string or None")
    try:
        ttl_ms = parse_duration_ms(ttl, what="ttl")
    except JobsError as error:
        raise JobInputInvalid(error.cause) from None
    dump_input(f"event {name}", {"payload": payload})
    events = getattr(get_driver(), "events", None)
    if events is None:
        raise JobsError("this driver has no event store", code="X_NOT_IMPLEMENTED")
    return events.publish(name, payload, key, ttl_ms)


def purge_expired_events() -> int:
    """Delete expired events (the retention sweep calls it); answers how many."""
    events = getattr(get_driver(), "events", None)
    return 0 if events is None else events.purge_expired()
