"""The operator's read of the event bus: :func:`events` (``operator.events``).

What the admin's events page shows: the stored events, newest first, each
with its payload redacted (``REDACT_KEYS``, as every operator answer about
job data is) and the waits that took it. Kept beside :mod:`.operator`,
which re-exports it, so that module stays under its size budget.
"""

from __future__ import annotations

from typing import Any

from .drivers import get_driver
from .drivers.base import MAX_JOB_PAGE
from .drivers.steps import EventListing
from .errors import JobPageInvalid
from .events import MAX_EVENT_NAME_LENGTH
from .redaction import redact
from .validation import text_problem

__all__ = ["DEFAULT_EVENT_PAGE", "events"]

DEFAULT_EVENT_PAGE = 50


def events(
    *, name: str | None = None, limit: int = DEFAULT_EVENT_PAGE
) -> list[dict[str, Any]]:
    """The stored events, newest first: at most ``limit`` (1..200), of ``name``.

    Each answer holds ``id``, ``name``, ``key``, ``payload`` (redacted),
    ``published_at``, ``expires_at`` (ISO) and ``matched``: the waits that
    took the event, each ``{"run_id", "step"}``. Expired events are listed
    until the retention sweep purges them.

    Raises:
        JobPageInvalid: a limit outside 1..200, or a name that is not one an
            event could have (before any statement).
    """
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise JobPageInvalid(
            "limit must be a whole number",
            fix=f"pass a limit of 1 to {MAX_JOB_PAGE}",
            meta={"limit": limit},
        )
    if not 1 <= limit <= MAX_JOB_PAGE:
        raise JobPageInvalid(
            f"limit must be between 1 and {MAX_JOB_PAGE}",
            fix=f"pass a limit of 1 to {MAX_JOB_PAGE}",
            meta={"limit": limit},
        )
    if name is not None:
        problem = text_problem(name, max_chars=MAX_EVENT_NAME_LENGTH)
        if problem is not None:
            raise JobPageInvalid(
                f"the event name {problem}",
                fix=f"pass an event name of 1 to {MAX_EVENT_NAME_LENGTH} "
                "characters, or none",
                meta={"filter": "name"},
            )
    return [_event(e) for e in get_driver().events.listing(name=name, limit=limit)]


def _event(listing: EventListing) -> dict[str, Any]:
    event = listing.event
    return {
        "id": str(event.id),
        "name": event.name,
        "key": event.correlation_key,
        "payload": redact(event.payload),
        "published_at": event.published_at.isoformat(),
        "expires_at": event.expires_at.isoformat(),
        "matched": [
            {"run_id": str(wait.run_id), "step": wait.step} for wait in listing.matched
        ],
    }
