"""Fenced writes: a lock holder paused past its ttl cannot write with its old token.

The app keeps a nullable integer column beside the data a lock protects
(``lock_token = models.BigIntegerField(null=True)``) and writes through
:func:`fenced_update`, which stores the holder's token with the write and
refuses a token smaller than the one stored. A holder that froze (a long
GC pause, a stopped VM) past its ttl wakes up believing it holds the lock;
the next holder has already written with a greater token, so the stale
write is refused with ``X_LOCK_TOKEN_STALE`` and changes nothing.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.core.exceptions import FieldDoesNotExist
from django.db import models, transaction
from django.db.models import Model, QuerySet

from ..errors import LockInvalid, LockTokenStale

__all__ = ["fenced_update"]

M = TypeVar("M", bound=Model)

MAX_TOKEN = 2**63 - 1
"""Tokens come from a bigint sequence; a larger one cannot be stored."""


def fenced_update(
    queryset: QuerySet[M], token: int, *, field: str = "lock_token", **values: Any
) -> int:
    """Update the rows of ``queryset`` with ``values``, fenced by ``token``.

    All or nothing, in one transaction: the rows are locked, and if any of
    them stores a token greater than ``token`` nothing is written;
    otherwise every row gets ``values`` and ``field = token``. The same
    holder may write any number of times (an equal token passes).

    Args:
        queryset: the rows the lock protects.
        token: ``held.token`` of the lock the caller holds.
        field: the integer column that stores the last writer's token.
        values: the columns to set, as for ``QuerySet.update``.

    Returns:
        The number of rows updated (as ``QuerySet.update`` answers): 0 when
        the queryset matches no row, which is not a refusal.

    Raises:
        LockInvalid: ``token`` is not a positive int that fits a bigint,
            ``field`` is not an integer column of the model, ``values``
            names ``field`` too or a column the model does not have
            (all before any statement).
        LockTokenStale: a later holder's token is stored; nothing written.
    """
    if (
        isinstance(token, bool)
        or not isinstance(token, int)
        or not 1 <= token <= MAX_TOKEN
    ):
        raise LockInvalid(
            f"a fencing token is a positive int of at most 2**63 - 1 "
            f"(held.token), not {token!r:.40}",
            fix="pass held.token of the lock you hold, or use held.fenced_update()",
        )
    model = queryset.model
    _check_token_field(model, field)
    if field in values:
        raise LockInvalid(
            f"{field!r} is the fencing token's column: fenced_update writes the "
            "token there itself, so values must not set it",
            fix=f"drop {field}= from the values",
        )
    unknown = [name for name in values if not _has_field(model, name)]
    if unknown:
        raise LockInvalid(
            f"{model.__name__} has no field {unknown[0]!r} to update",
            fix=f"pass values that are fields of {model.__name__}",
        )
    with transaction.atomic(using=queryset.db):
        # Lock every row first (in key order, so two writers never
        # deadlock), then read: a writer that checked before a later
        # holder's write committed would otherwise overwrite it.
        stored = [
            value
            for value in queryset.select_for_update()
            .order_by("pk")
            .values_list(field, flat=True)
            if value is not None
        ]
        newest = max(stored, default=None)
        if newest is not None and newest > token:
            raise LockTokenStale(
                f"a later holder wrote with token {newest}; this write's "
                f"token {token} is older and was refused",
                meta={"token": token, "stored": newest, "model": model.__name__},
            )
        return queryset.update(**{field: token}, **values)


def _check_token_field(model: type[Model], field: str) -> None:
    """``field`` must be a concrete integer column of ``model``."""
    try:
        column = model._meta.get_field(field)
    except FieldDoesNotExist as error:
        raise LockInvalid(
            f"{model.__name__} has no field {field!r} to store the fencing token in",
            fix="add lock_token = models.BigIntegerField(null=True) to the model, "
            "or pass field='<your column>'",
        ) from error
    if not isinstance(column, models.IntegerField) or not column.concrete:
        raise LockInvalid(
            f"{model.__name__}.{field} is not an integer column "
            f"({type(column).__name__}): a fencing token is compared as a number",
            fix="store the token in models.BigIntegerField(null=True)",
        )


def _has_field(model: type[Model], name: str) -> bool:
    try:
        model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return True
