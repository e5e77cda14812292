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

from django.db import transaction
from django.db.models import Model, QuerySet

from ..errors import LockInvalid, LockTokenStale

__all__ = ["fenced_update"]

M = TypeVar("M", bound=Model)


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
        The number of rows updated.

    Raises:
        LockInvalid: ``token`` is not a positive int, or ``field`` is not a
            column of the model (before any statement).
        LockTokenStale: a later holder's token is stored; nothing written.
    """
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise LockInvalid(
            f"a fencing token is a positive int (held.token), not {token!r:.40}"
        )
    model = queryset.model
    try:
        model._meta.get_field(field)
    except Exception as error:
        raise LockInvalid(
            f"{model.__name__} has no field {field!r} to store the fencing token in",
            fix="add lock_token = models.BigIntegerField(null=True) to the model, "
            "or pass field='<your column>'",
        ) from error
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
