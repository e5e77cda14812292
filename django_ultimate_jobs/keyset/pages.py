"""Paging a QuerySet by its primary key: ``pk > cursor ORDER BY pk LIMIT n``.

Never ``OFFSET``: a page costs the same at row 10 as at row 10 million, and
nothing but one page is held in memory. The cursor is the last primary key
of the page before, stored as JSON (a number or a string).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import (
    CharField,
    IntegerField,
    QuerySet,
    TextField,
    UUIDField,
)
from django.db.models.query import ModelIterable

from .errors import PassSourceInvalid

__all__ = [
    "checked_source",
    "cursor_value",
    "expected_total",
    "page_after",
    "paging_problem",
]


def paging_problem(queryset: QuerySet[Any]) -> str | None:
    """Why ``queryset`` cannot be walked in keyset pages, or ``None``.

    The answer finishes a sentence that starts "source() answered ...".
    """
    # Each page is queryset.filter(pk__gt=cursor).order_by("pk")[:batch]:
    # a slice or a union cannot be filtered again, and the handlers are given
    # model instances, not the dicts or tuples of .values().
    if queryset.query.is_sliced:
        return "a sliced QuerySet: the pass takes the pages itself (filter instead)"
    if queryset.query.combinator:
        return f"a {queryset.query.combinator}() of QuerySets, which cannot be paged"
    if queryset._iterable_class is not ModelIterable:
        return "a .values()/.values_list() QuerySet: handle() takes model instances"
    field = queryset.model._meta.pk
    while field is not None and field.is_relation:
        field = field.target_field  # a one-to-one primary key: the key it holds
    if not isinstance(field, IntegerField | CharField | TextField | UUIDField):
        kind = type(field).__name__
        return (
            f"a QuerySet of {queryset.model.__name__}, whose primary key is a "
            f"{kind}: keyset pages need a number, a string or a UUID"
        )
    return None


def checked_source(
    queryset: Any, model: type[Any], kind: str, name: str
) -> QuerySet[Any]:
    """``queryset`` (what a declaration's ``source()`` answered), if a pass
    of ``kind`` ``name`` over ``model`` can walk it.

    Raises:
        PassSourceInvalid: not a QuerySet of ``model``, or not pageable.
    """
    if not isinstance(queryset, QuerySet) or queryset.model is not model:
        kind_of = type(queryset).__name__
        problem: str | None = f"a {kind_of}, not a QuerySet of {model._meta.label}"
    else:
        problem = paging_problem(queryset)
    if problem is not None:
        raise PassSourceInvalid(
            f"source() of {kind} {name!r} answered {problem}", meta={kind: name}
        )
    return queryset


def page_after(queryset: QuerySet[Any], cursor: Any, batch: int) -> QuerySet[Any]:
    """The page of ``queryset`` after ``cursor`` (``None``: the first page)."""
    if cursor is not None:
        queryset = queryset.filter(pk__gt=cursor)
    return queryset.order_by("pk")[:batch]


def cursor_value(pk: Any) -> int | str | None:
    """``pk`` as a JSON cursor, or ``None`` when it cannot be one."""
    if isinstance(pk, UUID):
        return str(pk)
    if isinstance(pk, int | str) and not isinstance(pk, bool):
        return pk
    return None


def expected_total(queryset: QuerySet[Any], cursor: Any, rows_done: int) -> int:
    """The rows a pass over ``queryset`` will have done when it ends.

    From the start: the count. Going on after ``cursor``: the rows done
    plus those past it (rows inserted behind the cursor are not visited).
    """
    if cursor is None:
        return queryset.count()
    return rows_done + queryset.filter(pk__gt=cursor).count()
