"""``PostgresSearchIndex``: full text in PostgreSQL, in this package's table.

A document is one row of ``ultimate_jobs_search_document``: the index's
name, the row's primary key as text, a ``tsvector`` built by the database
(``to_tsvector`` of each field, ``setweight`` by its weight) and the row's
version. Its writes join the caller's transaction: a reindex page's
documents, its step record and its progress commit together (exactly once),
and an app that indexes a row in the transaction that saves it never shows
a document its readers cannot see the row of. Queries use the GIN index
(``websearch_to_tsquery``: quoted phrases, ``or``, ``-word``) and rank with
``ts_rank``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, LiteralString

from django.db import connections, router
from django.db.models import F, OuterRef, QuerySet, Subquery, TextField
from django.db.models.functions import Cast

from ..validation import storable_text
from .errors import SearchConfigUnknown
from .port import Document, Hit

__all__ = ["MAX_DOCUMENT_CHARS", "PostgresSearchIndex"]

MAX_DOCUMENT_CHARS = 250_000
"""Text kept per document (the fields in order, each cut to what is left):
PostgreSQL refuses a ``tsvector`` over 1 MB."""
_CONFIG = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# A configuration ::regconfig resolves: on the search path, by name.
_CONFIG_EXISTS: LiteralString = """
SELECT EXISTS (
  SELECT 1 FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace
   WHERE c.cfgname = %s AND n.nspname = ANY (current_schemas(true)))
"""
_known_configs: set[tuple[str, str]] = set()
"""(database alias, configuration) seen to exist: asked once a process."""

# One statement per page. The documents travel as one jsonb array (a
# statement of fixed shape whatever the page size); the database builds each
# tsvector, so the text search configuration is the one queries use. The
# version guard keeps a newer document when a replayed page or a stale read
# brings an older one (a NULL version, from a reindex without version=,
# always replaces).
_UPSERT: LiteralString = """
INSERT INTO ultimate_jobs_search_document AS stored
       (index_name, object_id, document, version, updated_at)
SELECT %(index)s, doc.id, {vector}, doc.version, now()
  FROM jsonb_to_recordset(%(docs)s::jsonb) AS doc(id text, version bigint, f jsonb)
    ON CONFLICT (index_name, object_id) DO UPDATE
   SET document = EXCLUDED.document,
       version = EXCLUDED.version,
       updated_at = EXCLUDED.updated_at
 WHERE stored.version IS NULL
    OR EXCLUDED.version IS NULL
    OR stored.version <= EXCLUDED.version
"""
# One field's weighted vector; field names and weights are parameters.
_FIELD: LiteralString = (
    "setweight(to_tsvector(%(config)s::regconfig, "
    "coalesce(doc.f->>%(f{n})s, '')), %(w{n})s::\"char\")"
)


class PostgresSearchIndex:
    """Full-text search in PostgreSQL (see the module docstring).

    Args:
        config: the text search configuration (``english``, ``simple``,
            ``german``...): how words are split and stemmed, at index and
            at query time alike.
    """

    supports_queryset = True

    def __init__(self, *, config: str = "english") -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"PostgresSearchIndex(config={self.config!r})"

    def check(self) -> str | None:
        """Refuse a configuration name that is no identifier."""
        if not isinstance(self.config, str) or not _CONFIG.match(self.config):
            return (
                "PostgresSearchIndex(config=...) must name a text search "
                f"configuration (lower-case letters, digits, _), got {self.config!r}"
            )
        return None

    def config_problem(self) -> str | None:
        """What is wrong with ``config`` in the database (one query, once a
        process), or ``None``; the system check ``ultimate_jobs.E301`` asks."""
        problem = self.check()
        if problem is not None:
            return problem
        alias = self._alias()
        if (alias, self.config) in _known_configs:
            return None
        with connections[alias].cursor() as cursor:
            cursor.execute(_CONFIG_EXISTS, [self.config])
            (exists,) = cursor.fetchone()
        if not exists:
            return (
                f"PostgresSearchIndex(config={self.config!r}): the database "
                f"{alias!r} has no text search configuration {self.config!r}"
            )
        _known_configs.add((alias, self.config))
        return None

    def require_config(self) -> None:
        """Refuse a configuration the database does not have.

        Raises:
            SearchConfigUnknown: terminal: every retry would fail alike.
        """
        problem = self.config_problem()
        if problem is not None:
            raise SearchConfigUnknown(problem, meta={"config": self.config})

    def upsert(self, index: str, documents: Sequence[Document]) -> None:
        """Write ``documents`` in one statement (the last of a repeated id wins).

        Raises:
            SearchConfigUnknown: ``config`` is no configuration of the database.
        """
        if not documents:
            return
        self.require_config()
        first = documents[0]
        names = list(first.fields)
        params: dict[str, Any] = {"index": index, "config": self.config}
        for n, name in enumerate(names):
            params[f"f{n}"] = name
            params[f"w{n}"] = first.weights.get(name, "D")
        vector = " || ".join(_FIELD.format(n=n) for n in range(len(names)))
        unique = {doc.id: doc for doc in documents}  # ON CONFLICT: once per row
        params["docs"] = json.dumps(
            [
                {"id": doc.id, "version": doc.version, "f": _texts(doc, names)}
                for doc in unique.values()
            ],
            ensure_ascii=False,
        )
        with self._cursor() as cursor:
            cursor.execute(_UPSERT.format(vector=vector), params)

    def remove(self, index: str, ids: Sequence[str]) -> None:
        """Delete the documents of ``ids``."""
        if ids:
            self._documents(index).filter(object_id__in=list(ids)).delete()

    def listed(self, index: str, *, after: str | None, limit: int) -> list[str]:
        """Stored ids after ``after``, in byte order (the column's C collation)."""
        documents = self._documents(index)
        if after is not None:
            documents = documents.filter(object_id__gt=after)
        return list(
            documents.order_by("object_id").values_list("object_id", flat=True)[:limit]
        )

    def search(self, index: str, query: str, *, limit: int) -> list[Hit]:
        """The best ``limit`` matches, by ``ts_rank``."""
        from django.contrib.postgres.search import SearchRank

        words = self._query(query)
        found = (
            self._documents(index)
            .filter(document=words)
            .annotate(rank=SearchRank(F("document"), words))
            .order_by("-rank", "object_id")
            .values_list("object_id", "rank")[:limit]
        )
        return [Hit(id=id_, score=float(rank)) for id_, rank in found]

    def filter_queryset(
        self, index: str, queryset: QuerySet[Any], query: str
    ) -> QuerySet[Any]:
        """Matches of ``queryset``, annotated ``search_rank``, best first.

        The match is a semi-join on the GIN index; the rank is read for the
        matched rows only.
        """
        from django.contrib.postgres.search import SearchRank

        words = self._query(query)
        pk = queryset.model._meta.pk
        assert pk is not None
        # The ids are cast to the key's type on the documents' side, so the
        # model's rows are found by their primary key index.
        key_type = pk.target_field if pk.is_relation else pk
        matched = self._documents(index).filter(document=words)
        ranks = matched.filter(
            object_id=Cast(OuterRef("pk"), output_field=TextField())
        ).annotate(rank=SearchRank(F("document"), words))
        keys = matched.annotate(key=Cast("object_id", output_field=key_type))
        return (
            queryset.filter(pk__in=keys.values("key"))
            .annotate(search_rank=Subquery(ranks.values("rank")[:1]))
            .order_by("-search_rank", "pk")
        )

    # -- plumbing ----------------------------------------------------------------

    def _query(self, query: str) -> Any:
        from django.contrib.postgres.search import SearchQuery

        self.require_config()
        return SearchQuery(query, config=self.config, search_type="websearch")

    def _documents(self, index: str) -> QuerySet[Any]:
        from ..models import SearchDocument

        return SearchDocument.objects.filter(index_name=index)

    def _cursor(self) -> Any:
        return connections[self._alias()].cursor()

    def _alias(self) -> str:
        from ..models import SearchDocument

        return router.db_for_write(SearchDocument)


def _texts(doc: Document, names: list[str]) -> dict[str, str]:
    """The document's fields, storable, cut to ``MAX_DOCUMENT_CHARS`` in all."""
    left, texts = MAX_DOCUMENT_CHARS, {}
    for name in names:
        text = storable_text(doc.fields.get(name) or "")[: max(left, 0)]
        left -= len(text)
        texts[name] = text
    return texts
