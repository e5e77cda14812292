"""The exports package's tables: export and import progress, exported parts.

Imported by ``django_ultimate_jobs.models`` (the app's models module), like
the ledger's.
"""

from __future__ import annotations

from django.db import models

from ..keyset.models import PassRecord

__all__ = ["Export", "ExportPart", "Import"]


class Export(PassRecord):
    """One artifact of a declared ``export_rows(...)``: a row per (name, prefix).

    ``cursor`` is the primary key of the last row written; ``pages_done`` is
    the number of parts written, so a run that goes on after a failure or a
    pause writes the next part after them.
    """

    name = models.TextField()
    prefix = models.TextField()
    params = models.JSONField(default=dict, blank=True)
    """What the source was asked with (``source(**params)``)."""
    format = models.TextField()
    bytes = models.BigIntegerField(default=0)
    """Bytes of the parts written."""

    class Meta:
        db_table = "ultimate_jobs_export"
        ordering = ["name", "prefix"]
        constraints = [
            models.UniqueConstraint("name", "prefix", name="uj_export_artifact"),
        ]

    def __str__(self) -> str:
        return f"export {self.name} at {self.prefix} ({self.state})"

    def reset_progress(self) -> None:
        """Start over: no part written."""
        super().reset_progress()
        self.bytes = 0


class ExportPart(models.Model):
    """One part an export wrote: the manifest is built from these rows."""

    export = models.ForeignKey(Export, on_delete=models.CASCADE, related_name="parts")
    index = models.IntegerField()
    rows = models.IntegerField()
    bytes = models.BigIntegerField()
    sha256 = models.TextField()

    class Meta:
        db_table = "ultimate_jobs_export_part"
        ordering = ["export", "index"]
        constraints = [
            models.UniqueConstraint("export", "index", name="uj_export_part_index"),
        ]

    def __str__(self) -> str:
        return f"part {self.index} of {self.export_id}"


class Import(PassRecord):
    """One artifact loaded by a declared ``import_rows(...)``: a row per (name, prefix).

    ``cursor`` is the index of the last part loaded; ``rows_done`` the rows
    loaded (inserted or updated).
    """

    name = models.TextField()
    prefix = models.TextField()

    class Meta:
        db_table = "ultimate_jobs_import"
        ordering = ["name", "prefix"]
        constraints = [
            models.UniqueConstraint("name", "prefix", name="uj_import_artifact"),
        ]

    def __str__(self) -> str:
        return f"import {self.name} from {self.prefix} ({self.state})"
