"""The Backfills page: each declared backfill's progress; pause and resume.

A :class:`~.passes.PassAdmin` over the ``Backfill`` rows: read-only, pause
and resume for holders of ``ultimate_jobs.change_backfill``, through
:mod:`django_ultimate_jobs.backfills` like the command.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from ..backfills import pause_backfill, resume_backfill
from ..errors import BackfillUnknown, JobsError
from ..models import Backfill
from .passes import PASS_FIELDS, PassAdmin

__all__ = ["BackfillAdmin"]


@admin.register(Backfill)
class BackfillAdmin(PassAdmin):
    """Backfills: progress per name; pause / resume for ``change_backfill``."""

    kind = "backfill"
    operate_permission = "ultimate_jobs.change_backfill"
    list_display = (
        "name",
        "state",
        "progress",
        "pages_done",
        "started_at",
        "finished_at",
        "updated_at",
        "error",
    )
    fields = ("name", *PASS_FIELDS)
    ordering = ("name",)

    def pause_row(self, row: Backfill) -> None:
        """:func:`~django_ultimate_jobs.backfills.pause_backfill`."""
        pause_backfill(row.name)

    def resume_row(self, row: Backfill) -> Any:
        """:func:`~django_ultimate_jobs.backfills.resume_backfill`."""
        return resume_backfill(row.name)

    def unknown(self, value: str) -> JobsError:
        """``X_BACKFILL_UNKNOWN``."""
        return BackfillUnknown(
            f"no backfill can be named {value!r}", meta={"backfill": value}
        )
