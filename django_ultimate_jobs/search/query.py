"""Querying an index: refusals of a bad query, and hits as a QuerySet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Case, FloatField, QuerySet, Value, When

from ..validation import storable
from .port import Hit

__all__ = ["MAX_HITS", "MAX_QUERY_CHARS", "hits_queryset", "search_problem"]

MAX_QUERY_CHARS = 1000
MAX_HITS = 10_000


def search_problem(query: Any, limit: Any) -> str | None:
    """What makes ``query`` (and ``limit``) unsearchable, or ``None``."""
    if not isinstance(query, str):
        return f"a search query must be a string, not {type(query).__name__}"
    if len(query) > MAX_QUERY_CHARS:
        return (
            f"a search query holds {len(query)} characters; at most {MAX_QUERY_CHARS}"
        )
    if not storable(query):
        return "a search query holds a NUL or a lone surrogate"
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_HITS
    ):
        return f"a search limit must be a whole number from 1 to {MAX_HITS:,}, got {limit!r:.40}"
    return None


def hits_queryset(queryset: QuerySet[Any], hits: Sequence[Hit]) -> QuerySet[Any]:
    """The rows of ``hits`` in ``queryset``, annotated ``search_rank``, best first."""
    pk = queryset.model._meta.pk
    assert pk is not None
    scores = {}
    for hit in hits:
        try:
            scores[pk.to_python(hit.id)] = hit.score
        except (ValidationError, ValueError, TypeError):
            continue  # an id no row can have: nothing to show for it
    if not scores:
        return queryset.none()
    rank = Case(
        *(When(pk=key, then=Value(score)) for key, score in scores.items()),
        output_field=FloatField(),
    )
    return (
        queryset.filter(pk__in=list(scores))
        .annotate(search_rank=rank)
        .order_by("-search_rank", "pk")
    )
