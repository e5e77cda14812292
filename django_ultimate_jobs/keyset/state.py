"""``PassState``: where a pass stands (no model: importable before the app registry)."""

from __future__ import annotations

from django.db import models

__all__ = ["PassState"]


class PassState(models.TextChoices):
    """Where a pass stands."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
