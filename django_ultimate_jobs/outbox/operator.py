"""The operator's way out of a stuck outbox: list unpublished messages, discard one.

A message that can never be published (its input refused by the jobs
table, a job name no longer deployed that a constraint refuses...) stops
every batch at itself, so every message staged after it waits, by design.
``manage.py jobs outbox`` lists what waits (oldest first, with each one's
failed publishes and last error) and ``manage.py jobs outbox-discard <id>``
deletes one unpublished message, answering its content so the operator
keeps a record. ORM statements on ``OUTBOX_DATABASE`` (operator code).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.utils import timezone

from ..conf import jobs_settings
from ..errors import JobInputInvalid, JobNotFound
from ..models import OutboxMessage
from ..redaction import redact
from .store import outbox_database

__all__ = ["MAX_LISTED", "discard", "unpublished"]

logger = logging.getLogger("django_ultimate_jobs")

MAX_LISTED = 200
"""The most messages ``jobs outbox`` lists (the oldest: those that hold the rest)."""


def unpublished(limit: int = 50) -> dict[str, Any]:
    """The oldest unpublished messages, in publish order, and how many wait.

    Each message's input is redacted (``REDACT_KEYS``).
    """
    if not 1 <= limit <= MAX_LISTED:
        raise JobInputInvalid(
            f"--limit must be from 1 to {MAX_LISTED}, got {limit!r}",
            fix=f"pass --limit between 1 and {MAX_LISTED}",
        )
    rows = OutboxMessage.objects.using(outbox_database()).filter(published_at=None)
    page = rows.order_by("staged_at", "id")[:limit]
    messages = [_message_dict(m, input=redact(m.input)) for m in page]
    return {"pending": rows.count(), "messages": messages}


def discard(message_id: str | UUID) -> dict[str, Any]:
    """Delete one unpublished message: it will never become a job.

    Answers the message as it was (name, queue, input...), its input
    unredacted: the one deliberate full print, so the operator can enqueue
    its job again by hand once the cause is fixed (``jobs outbox-discard``
    asks for ``--unredacted`` first).

    Raises:
        JobInputInvalid: the id is not a UUID.
        JobNotFound: no unpublished message has that id (a published one
            is swept by retention; it is its job now).
    """
    try:
        parsed = message_id if isinstance(message_id, UUID) else UUID(message_id)
    except ValueError as error:
        raise JobInputInvalid(
            f"{message_id!r:.80} is not an outbox message id (a UUID)",
            fix="copy the id from python manage.py jobs outbox",
        ) from error
    rows = OutboxMessage.objects.using(outbox_database())
    message = rows.filter(id=parsed, published_at=None).first()
    if message is None or not rows.filter(id=parsed, published_at=None).delete()[0]:
        raise JobNotFound(
            "no unpublished outbox message has that id",
            fix="python manage.py jobs outbox lists the unpublished ones",
            meta={"id": str(parsed)},
        )
    answer = _message_dict(message, input=message.input)
    logger.warning(
        "jobs.outbox.discarded",
        extra={"outbox_message": str(parsed), "job": message.name},
    )
    return answer


def _message_dict(message: OutboxMessage, *, input: Any) -> dict[str, Any]:
    return {
        "id": str(message.id),
        "name": message.name,
        "queue": message.queue,
        "input": input,
        "status": status(message),
        "staged_at": message.staged_at,
        "claimed_by": message.claimed_by,
        "claimed_at": message.claimed_at,
        "attempts": message.attempts,
        "last_error": message.last_error,
    }


def status(message: OutboxMessage) -> str:
    """published, claimed, claim lapsed, failed or pending.

    ``claim lapsed``: the relay that claimed it is gone (killed) or stuck
    past ``OUTBOX_CLAIM_LEASE``; the next relay pass takes it again.
    """
    if message.published_at is not None:
        return "published"
    if message.claimed_at is not None:
        lease = timedelta(milliseconds=jobs_settings().outbox_claim_lease_ms)
        if message.claimed_at < timezone.now() - lease:
            return "claim lapsed"
        return "claimed"
    return "failed" if message.attempts else "pending"
