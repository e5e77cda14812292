"""Search indexes kept by jobs: ``reindex(...)``, the port, and search helpers.

``reindex(name=, model=, index=, fields=)`` declares an index over a model
and the job that rebuilds it in resumable pages; ``handle.search(query)``
answers the matching rows as a QuerySet (``handle.search_ids`` their keys)
and ``handle.sync(pks)`` brings some rows' documents up to date.
:class:`PostgresSearchIndex` (full text, in this package's table) and
:class:`MemorySearchIndex` (tests) implement :class:`SearchIndex`; another
engine is one class. Importing this module touches no model.
"""

from __future__ import annotations

from . import checks as _checks  # noqa: F401  (registers the system check)
from .memory import MemorySearchIndex
from .port import Document, Hit, SearchIndex
from .postgres import PostgresSearchIndex
from .reindex import (
    ReindexHandle,
    enqueue_reindex,
    get_reindex,
    pause_reindex,
    registered_reindexes,
    reindex,
    resume_reindex,
    search,
)

__all__ = [
    "Document",
    "Hit",
    "MemorySearchIndex",
    "PostgresSearchIndex",
    "ReindexHandle",
    "SearchIndex",
    "enqueue_reindex",
    "get_reindex",
    "pause_reindex",
    "registered_reindexes",
    "reindex",
    "resume_reindex",
    "search",
]
