"""``MetricsSnapshot``: the fleet's shared, cached read of the queues.

One row per kind of snapshot (today one: ``queues``). Whoever scrapes first
after the row is older than ``METRICS_INTERVAL`` locks it, reads the queues
and writes the answer back; every other scrape in the fleet reads the row.
See :mod:`.snapshot`.
"""

from __future__ import annotations

from django.db import models

__all__ = ["MetricsSnapshot"]


class MetricsSnapshot(models.Model):
    """One cached read of the queues, shared by every process of the fleet."""

    key = models.TextField(primary_key=True)
    taken_at = models.DateTimeField()
    """When the queues were read (the database clock)."""
    payload = models.JSONField(default=dict)
    """What was read: ``{"queues": [...], "workers": n}``."""
    reads = models.BigIntegerField(default=0)
    """How many times the queues were read for this row: at most one more per
    interval, however many processes are scraped (the tests count it)."""

    class Meta:
        db_table = "ultimate_jobs_metrics_snapshot"

    def __str__(self) -> str:
        return f"{self.key} at {self.taken_at:%Y-%m-%d %H:%M:%S}"
