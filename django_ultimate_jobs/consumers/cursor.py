"""What ``fetch`` answered, checked before anything is handled.

A batch is refused, and the consumer halted, when it is not a batch, when
its cursor cannot be stored as JSON, when the cursor went backwards, or
when a batch of items did not move it (the next fetch would answer the
same items, forever). Halting, not retrying: a stream that rewound needs a
person to decide whether re-reading it is wanted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..validation import JsonRefused, json_text
from .declaration import Batch, ConsumerSpec
from .errors import ConsumerBatchInvalid, ConsumerCursorBackwards

__all__ = ["checked_batch", "cursor_order_problem"]


def checked_batch(spec: ConsumerSpec, answer: Any, stored: Any) -> Batch:
    """``answer`` as a :class:`Batch` whose cursor may follow ``stored``.

    Raises:
        ConsumerBatchInvalid: not a batch, or a cursor that cannot be
            stored or ordered.
        ConsumerCursorBackwards: the cursor is behind ``stored``, or a
            batch of items left it where it was.
    """
    batch = _as_batch(spec, answer)
    try:
        json_text(batch.cursor)
    except JsonRefused as refused:
        raise ConsumerBatchInvalid(
            f"fetch() of consumer {spec.name!r} answered a cursor that {refused.reason}",
            meta={"consumer": spec.name},
        ) from None
    if batch.items and batch.cursor == stored:
        raise ConsumerCursorBackwards(
            f"fetch() of consumer {spec.name!r} answered {len(batch.items)} "
            "item(s) without moving the cursor: the next fetch would answer "
            "them again",
            meta={"consumer": spec.name, "items": len(batch.items)},
        )
    if (
        spec.order is not None
        and stored is not None
        and _behind(spec, batch.cursor, stored)
    ):
        raise ConsumerCursorBackwards(
            f"fetch() of consumer {spec.name!r} answered a cursor behind the "
            "stored one",
            meta={"consumer": spec.name},
        )
    return batch


def _as_batch(spec: ConsumerSpec, answer: Any) -> Batch:
    if isinstance(answer, Batch):
        batch = answer
    elif isinstance(answer, tuple) and len(answer) == 2:
        batch = Batch(items=answer[0], cursor=answer[1])
    else:
        raise ConsumerBatchInvalid(
            f"fetch() of consumer {spec.name!r} answered a "
            f"{type(answer).__name__}, not a Batch(items, cursor)",
            meta={"consumer": spec.name},
        )
    if isinstance(batch.items, str | bytes) or not isinstance(batch.items, Sequence):
        raise ConsumerBatchInvalid(
            f"fetch() of consumer {spec.name!r} answered items that are a "
            f"{type(batch.items).__name__}, not a list or tuple",
            meta={"consumer": spec.name},
        )
    return batch


def cursor_order_problem(spec: ConsumerSpec, cursor: Any) -> str | None:
    """Why the consumer's ``order=`` could never compare ``cursor``, or ``None``.

    ``"natural"`` compares numbers or strings; a key callable must take it;
    ``None`` (opaque cursors) takes any. ``None`` (the stream's start) fits all.
    """
    if cursor is None or spec.order is None:
        return None
    if callable(spec.order):
        try:
            spec.order(cursor)
        except Exception as error:
            return f"order= of consumer {spec.name!r} cannot key it ({type(error).__name__})"
        return None
    if isinstance(cursor, str) or (
        isinstance(cursor, int | float) and not isinstance(cursor, bool)
    ):
        return None
    return (
        f"consumer {spec.name!r} orders its cursors naturally: a number or a "
        f"string, not a {type(cursor).__name__}"
    )


def _behind(spec: ConsumerSpec, new: Any, old: Any) -> bool:
    if new is None:
        return True  # back to the start of the stream
    if callable(spec.order):
        try:
            return bool(spec.order(new) < spec.order(old))
        except Exception as error:
            raise ConsumerBatchInvalid(
                f"order= of consumer {spec.name!r} could not compare two "
                f"cursors ({type(error).__name__})",
                meta={"consumer": spec.name},
            ) from error
    numbers = all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in (new, old)
    )
    if numbers or (isinstance(new, str) and isinstance(old, str)):
        return bool(new < old)
    raise ConsumerBatchInvalid(
        f"consumer {spec.name!r} cannot order a {type(new).__name__} cursor "
        f"after a {type(old).__name__} one",
        fix="answer numbers or strings as cursors, or declare order=None "
        "(opaque cursors) or order=<key callable>",
        meta={"consumer": spec.name},
    )
