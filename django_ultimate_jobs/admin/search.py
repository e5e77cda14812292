"""The Reindexes page: each reindex's progress (phase, rows, documents removed).

A :class:`~.passes.PassAdmin` over the ``Reindex`` rows: read-only, pause
and resume for holders of ``ultimate_jobs.change_reindex``, through
:mod:`django_ultimate_jobs.search.reindex` like ``jobs_reindex``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from ..errors import JobsError
from ..models import Reindex
from ..search.errors import ReindexUnknown
from ..search.reindex import pause_reindex, resume_reindex
from .passes import PASS_FIELDS, PassAdmin

__all__ = ["ReindexAdmin"]


@admin.register(Reindex)
class ReindexAdmin(PassAdmin):
    """Reindexes: progress per name; pause / resume for ``change_reindex``."""

    kind = "reindex"
    operate_permission = "ultimate_jobs.change_reindex"
    list_display = (
        "name",
        "state",
        "phase",
        "progress",
        "removed",
        "pages_done",
        "started_at",
        "finished_at",
        "error",
    )
    fields = ("name", "phase", "removed", *PASS_FIELDS)
    ordering = ("name",)

    def pause_row(self, row: Reindex) -> None:
        """:func:`~django_ultimate_jobs.search.reindex.pause_reindex`."""
        pause_reindex(row.name)

    def resume_row(self, row: Reindex) -> Any:
        """:func:`~django_ultimate_jobs.search.reindex.resume_reindex`."""
        return resume_reindex(row.name)

    def unknown(self, value: str) -> JobsError:
        """``X_REINDEX_UNKNOWN``."""
        return ReindexUnknown(
            f"no reindex can be named {value!r}", meta={"reindex": value}
        )
