"""The search package's tables: PostgreSQL documents and reindex progress.

Imported by ``django_ultimate_jobs.models`` (the app's models module), like
the ledger's.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.search import SearchVectorExact
from django.db import models
from django.db.models.functions import Now

from ..keyset.models import PassRecord

__all__ = ["GinIndex", "Reindex", "SearchDocument", "TsVectorField"]


# Not django.contrib.postgres's SearchVectorField and GinIndex: those make
# `manage.py check` demand "django.contrib.postgres" in INSTALLED_APPS
# (postgres.E005), an install step for every project, searching or not.
# A tsvector needs no adapter: it is written by SQL and read as text.


class TsVectorField(models.Field):  # type: ignore[type-arg]
    """A PostgreSQL ``tsvector`` column; ``field=SearchQuery(...)`` is ``@@``."""

    description = "Text search vector"

    def db_type(self, connection: Any) -> str:
        """``tsvector``."""
        return "tsvector"


TsVectorField.register_lookup(SearchVectorExact)


class GinIndex(models.Index):
    """A ``USING gin`` index (on a ``tsvector``)."""

    suffix = "gin"

    def create_sql(
        self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any
    ) -> Any:
        """The ``CREATE INDEX ... USING gin`` statement."""
        return super().create_sql(model, schema_editor, using=" USING gin", **kwargs)


class SearchDocument(models.Model):
    """One row's full-text document in one index (``PostgresSearchIndex``).

    Kept in a table of this package, not in a column of the indexed model:
    any model can be indexed without a migration of its own (a third-party
    model too), a rebuild writes only here (the model's rows are read, never
    locked or rewritten), and one index is dropped by deleting its rows.
    Written by raw SQL (``search/postgres.py``); the model is for the
    migration and the queries.
    """

    index_name = models.TextField()
    object_id = models.TextField(db_collation="C")
    """The row's primary key as text; byte order, so the sweep pages by it."""
    document = TsVectorField()
    version = models.BigIntegerField(null=True, blank=True)
    """The row's version when it was indexed (see ``reindex(version=)``)."""
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_search_document"
        constraints = [
            models.UniqueConstraint(
                "index_name", "object_id", name="uj_search_doc_key"
            ),
        ]
        indexes = [GinIndex(fields=["document"], name="uj_search_doc_gin")]

    def __str__(self) -> str:
        return f"{self.index_name} document {self.object_id}"


class Reindex(PassRecord):
    """One declared ``reindex(...)``'s progress: a row per name.

    A pass has two phases: ``rows`` (every row of the source indexed, a
    page a step) then ``sweep`` (every document whose row the source no
    longer answers removed); ``cursor`` is the last primary key in the
    first, the last document id in the second.
    """

    class Phase(models.TextChoices):
        """Which half of the pass is running."""

        ROWS = "rows"
        SWEEP = "sweep"

    name = models.TextField(primary_key=True)
    phase = models.TextField(choices=Phase.choices, default=Phase.ROWS)
    removed = models.BigIntegerField(default=0)
    """Documents the sweep removed."""

    class Meta:
        db_table = "ultimate_jobs_reindex"
        ordering = ["name"]
        verbose_name_plural = "reindexes"

    def __str__(self) -> str:
        return f"reindex {self.name} ({self.state})"

    def reset_progress(self) -> None:
        """Start over: the rows phase, nothing removed."""
        super().reset_progress()
        self.phase, self.removed = self.Phase.ROWS, 0
