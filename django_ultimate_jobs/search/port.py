"""The search-index port: what a search engine must do for ``reindex(...)``.

One engine object may hold many indexes: every verb takes the index's name
(the reindex's). Documents are keyed by the row's primary key as text; an
engine keeps one document per id, and a document with a ``version`` never
replaces a stored one with a newer version (so a replayed page or a stale
read cannot undo a newer write). Swapping engines is one class implementing
:class:`SearchIndex`: :class:`~.postgres.PostgresSearchIndex` (full text in
PostgreSQL) and :class:`~.memory.MemorySearchIndex` (in memory, for tests)
ship.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from django.db.models import QuerySet

__all__ = ["WEIGHTS", "Document", "Hit", "SearchIndex"]

WEIGHTS = ("A", "B", "C", "D")
"""Field weights, highest first (PostgreSQL's ``setweight`` letters)."""


@dataclass(frozen=True, slots=True)
class Document:
    """What an index stores for one row."""

    id: str
    """The row's primary key, as text."""
    fields: Mapping[str, str]
    """Field name -> its text."""
    weights: Mapping[str, str]
    """Field name -> ``A`` (ranks highest) to ``D``."""
    version: int | None = None
    """A stored document is replaced only by one of the same or a newer version."""


@dataclass(frozen=True, slots=True)
class Hit:
    """One result of :meth:`SearchIndex.search`."""

    id: str
    score: float


@runtime_checkable
class SearchIndex(Protocol):
    """What an index engine must do (see the module docstring).

    ``supports_queryset`` declares :meth:`filter_queryset`: an engine in the
    rows' own database can filter a QuerySet itself (lazy, composable,
    paginated by the database); any other engine is queried through
    :meth:`search`, and the helper turns its ids into a QuerySet.
    """

    supports_queryset: bool

    def check(self) -> str | None:
        """What is wrong with the engine's own configuration, or ``None``."""
        ...

    def upsert(self, index: str, documents: Sequence[Document]) -> None:
        """Store ``documents``, replacing older versions of the same ids."""
        ...

    def remove(self, index: str, ids: Sequence[str]) -> None:
        """Remove the documents of ``ids`` (unknown ids are no error)."""
        ...

    def listed(self, index: str, *, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` stored ids after ``after``, in code-point order."""
        ...

    def search(self, index: str, query: str, *, limit: int) -> list[Hit]:
        """The best ``limit`` matches of ``query``, best first."""
        ...

    def filter_queryset(
        self, index: str, queryset: QuerySet[Any], query: str
    ) -> QuerySet[Any]:
        """``queryset`` narrowed to matches, annotated ``search_rank``, best first."""
        ...
