"""The consumers' table: one row per consumer, its cursor and its counts.

Imported by ``django_ultimate_jobs.models``, never by
``django_ultimate_jobs.consumers`` itself.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

__all__ = ["Consumer"]


class Consumer(models.Model):
    """A declared ``consumer(...)``: where it is in its stream.

    ``cursor`` moves only in the transaction that commits its batch's
    effects; ``version`` grows by one with each such commit, and a run
    commits a batch only if the version is still the one it fetched at (a
    compare-and-set: two runs never both commit after one cursor).
    """

    class State(models.TextChoices):
        """Where a consumer stands."""

        IDLE = "idle"
        RUNNING = "running"
        PAUSED = "paused"
        HALTED = "halted"
        """Stopped by a cursor that went backwards or a malformed batch."""

    name = models.TextField(primary_key=True)
    state = models.TextField(choices=State.choices, default=State.IDLE)
    cursor = models.JSONField(null=True, blank=True)
    version = models.BigIntegerField(default=0)
    batches_done = models.BigIntegerField(default=0)
    items_done = models.BigIntegerField(default=0)
    run_id = models.UUIDField(null=True, blank=True)
    """The run that started last."""
    run_batches = models.IntegerField(default=0)
    run_items = models.BigIntegerField(default=0)
    """Items handled by that run."""
    started_at = models.DateTimeField(null=True, blank=True)
    last_batch_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())
    error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "ultimate_jobs_consumer"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"consumer {self.name} ({self.state})"
