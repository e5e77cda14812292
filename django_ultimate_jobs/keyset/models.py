"""``PassRecord``: the progress row a paged pass keeps (abstract).

A concrete record (``Backfill``, ``Reindex``, ``Export``, ``Import``) adds
its key and what only its kind counts. The pass writes the row at its start,
in each page's own step transaction and at its end; an operator's pause or
resume writes its state. The row only reports: where an attempt goes on is
decided by the step checkpoints of its run, and where a new run (a resume,
a retry after the job was re-driven) starts is the row's ``cursor``.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from .state import PassState

__all__ = ["PassRecord", "PassState"]


class PassRecord(models.Model):
    """The progress of one pass (see the module docstring)."""

    State = PassState

    state = models.TextField(choices=PassState.choices, default=PassState.PENDING)
    cursor = models.JSONField(null=True, blank=True)
    """Where the pass is: the primary key of the last row done (JSON: a
    number or a string), ``None`` before the first page."""
    rows_done = models.BigIntegerField(default=0)
    pages_done = models.IntegerField(default=0)
    total = models.BigIntegerField(null=True, blank=True)
    """The rows the pass expects, counted at its start."""
    run_id = models.UUIDField(null=True, blank=True)
    """The run of the pass that wrote last."""
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())
    error = models.TextField(blank=True, default="")

    class Meta:
        abstract = True

    def reset_progress(self) -> None:
        """Forget how far the last pass got (a pass that starts over).

        A kind with counters of its own extends it.
        """
        self.cursor, self.rows_done, self.pages_done, self.total = None, 0, 0, None
        self.started_at = self.finished_at = None
