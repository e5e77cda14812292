"""``publish_event()``: wake the runs waiting for an event.

Inside ``transaction.atomic()`` the event commits or rolls back with the
caller's transaction (it is written on the same connection); a rolled-back
publish matches nothing. The publish wakes parked waiters in the same
statement and again at commit.
"""

from __future__ import annotations

from typing import Any

from .drivers import get_driver
from .drivers.steps import EventRecord
from .durations import DurationInput, parse_duration_ms
from .errors import JobInputInvalid, JobsError
from .validation import MAX_KEY_BYTES, JsonRefused, json_text, text_problem

__all__ = ["check_event_names", "publish_event", "purge_expired_events"]

DEFAULT_TTL: DurationInput = "7d"
MAX_EVENT_NAME_LENGTH = 200


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
        JobInputInvalid: a bad name, key, ttl or payload (see
            :func:`check_event_names`); nothing written.
    """
    check_event_names(name, key)
    try:
        ttl_ms = parse_duration_ms(ttl, what="ttl")
    except JobsError as error:
        raise JobInputInvalid(error.cause, fix=error.fix) from None
    try:
        json_text(payload)
    except JsonRefused as refused:
        raise JobInputInvalid(
            f"the payload of event {name} {refused.reason}",
            fix=refused.fix,
            meta={"event": name},
        ) from None
    return get_driver().events.publish(name, payload, key, ttl_ms)


def check_event_names(name: Any, key: Any) -> None:
    """Refuse an event name or key PostgreSQL cannot store or index.

    A name is 1 to 200 characters, a key (when given) at most 512 UTF-8
    bytes; neither may hold a NUL or a lone surrogate.

    Raises:
        JobInputInvalid: naming which of the two is refused, never its value.
    """
    problem = text_problem(name, max_chars=MAX_EVENT_NAME_LENGTH)
    if problem is not None:
        raise JobInputInvalid(
            f"an event name {problem}",
            fix=f"name events with 1 to {MAX_EVENT_NAME_LENGTH} printable characters",
        )
    if key is not None:
        problem = text_problem(key, max_bytes=MAX_KEY_BYTES)
        if problem is not None:
            raise JobInputInvalid(
                f"an event key {problem}",
                fix=f"pass a key of at most {MAX_KEY_BYTES} UTF-8 bytes, or None",
            )


def purge_expired_events() -> int:
    """Delete expired events (the retention sweep calls it); answers how many."""
    return get_driver().events.purge_expired()
