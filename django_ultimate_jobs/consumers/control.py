"""Operator verbs on consumers: run now, pause, resume, set the cursor.

Each checks the consumer's state under a row lock and refuses, with
``X_CONSUMER_STATE_INVALID``, a move its state does not have; nothing
changes then. The command and the admin call these.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models.functions import Now

from ..validation import JsonRefused, json_text
from .cursor import cursor_order_problem
from .declaration import get_consumer
from .errors import ConsumerCursorInvalid, ConsumerStateInvalid

if TYPE_CHECKING:
    from ..drivers.base import Enqueued
    from .models import Consumer

__all__ = [
    "consumer_row",
    "pause_consumer",
    "resume_consumer",
    "run_consumer",
    "set_consumer_cursor",
]


def consumer_row(name: str, *, lock: bool = False) -> Consumer:
    """The row of consumer ``name`` (created at its ``start=`` cursor if new).

    Raises:
        ConsumerUnknown: not declared.
    """
    from .models import Consumer

    spec = get_consumer(name)
    rows = Consumer.objects.select_for_update() if lock else Consumer.objects
    row, _ = rows.get_or_create(name=name, defaults={"cursor": spec.start})
    return row


def run_consumer(name: str) -> Enqueued:
    """Start a run of ``name`` now (deduplicated onto a live one).

    Raises:
        ConsumerUnknown: not declared.
        ConsumerStateInvalid: it is paused or halted.
    """
    from .models import Consumer

    spec = get_consumer(name)
    with transaction.atomic():
        row = consumer_row(name, lock=True)
        if row.state in (Consumer.State.PAUSED, Consumer.State.HALTED):
            raise ConsumerStateInvalid(
                f"consumer {name!r} is {row.state}: resume it first",
                fix=f"python manage.py jobs_consumer {name} --resume",
                meta={"consumer": name, "state": row.state},
            )
        return spec.job.enqueue()


def pause_consumer(name: str) -> None:
    """Pause ``name``: a running run stops before its next batch commits.

    Raises:
        ConsumerUnknown: not declared.
        ConsumerStateInvalid: it is paused or halted already.
    """
    from .models import Consumer

    _move(
        name,
        frm=(Consumer.State.IDLE, Consumer.State.RUNNING),
        to=Consumer.State.PAUSED,
    )


def resume_consumer(name: str) -> None:
    """Resume a paused or halted ``name`` (its error cleared); the next
    supervisor tick starts a run.

    Raises:
        ConsumerUnknown: not declared.
        ConsumerStateInvalid: it is neither paused nor halted.
    """
    from .models import Consumer

    _move(
        name, frm=(Consumer.State.PAUSED, Consumer.State.HALTED), to=Consumer.State.IDLE
    )


def _move(name: str, *, frm: tuple[str, ...], to: str) -> None:
    with transaction.atomic():
        row = consumer_row(name, lock=True)
        if row.state not in frm:
            raise ConsumerStateInvalid(
                f"consumer {name!r} is {row.state}: it cannot become {to}",
                meta={"consumer": name, "state": row.state},
            )
        row.state = to
        if to != "paused":
            row.error = ""
        row.updated_at = Now()
        row.save(update_fields=["state", "error", "updated_at"])


def parse_cursor(text: str) -> Any:
    """A cursor given as JSON text (the command's ``--set-cursor``).

    Raises:
        ConsumerCursorInvalid: not JSON, or not storable.
    """
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        raise ConsumerCursorInvalid(
            "the cursor is not JSON (a string needs its quotes: '\"evt_1\"')"
        ) from None
    return value


def set_consumer_cursor(name: str, cursor: Any) -> None:
    """Set the cursor of a paused or halted ``name``; backwards is allowed
    (re-reading the stream is an operator's decision).

    Raises:
        ConsumerUnknown: not declared.
        ConsumerStateInvalid: it is neither paused nor halted.
        ConsumerCursorInvalid: the cursor cannot be stored as JSON, or
            the consumer's ``order=`` could never compare it (a list for
            ``"natural"``): its next fetch would halt on it.
    """
    from .models import Consumer

    try:
        json_text(cursor)
    except JsonRefused as refused:
        raise ConsumerCursorInvalid(
            f"the cursor {refused.reason}", meta={"consumer": name}
        ) from None
    problem = cursor_order_problem(get_consumer(name), cursor)
    if problem is not None:
        raise ConsumerCursorInvalid(
            f"the cursor does not fit: {problem}", meta={"consumer": name}
        )
    with transaction.atomic():
        row = consumer_row(name, lock=True)
        if row.state not in (Consumer.State.PAUSED, Consumer.State.HALTED):
            raise ConsumerStateInvalid(
                f"consumer {name!r} is {row.state}: pause it before setting its cursor",
                fix=f"python manage.py jobs_consumer {name} --pause",
                meta={"consumer": name, "state": row.state},
            )
        # A version bump: a run that fetched after the old cursor cannot
        # commit after the new one.
        Consumer.objects.filter(name=name).update(
            cursor=cursor, version=row.version + 1, updated_at=Now()
        )
