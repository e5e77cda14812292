"""The Backfills page: each declared backfill's progress; pause and resume.

A read-only list of the ``Backfill`` rows (filter by state). Pause and
resume are list actions: Django posts them with the CSRF token, offers them
only to holders of ``ultimate_jobs.change_backfill`` and checks it again on
the POST, and each backfill acted on is logged to ``LogEntry``. Both go
through :mod:`django_ultimate_jobs.backfills`, like the command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.db.models import QuerySet
from django.http import HttpRequest

from ..backfills import pause_backfill, resume_backfill
from ..errors import JobsError
from ..models import Backfill
from .audit import log_operator_action

__all__ = ["BackfillAdmin"]

# The state filter's own parameter; nothing else reaches the query string.
_LOOKUPS = frozenset({"state", "state__exact"})


@admin.register(Backfill)
class BackfillAdmin(admin.ModelAdmin):
    """Backfills: progress per name; pause / resume for ``change_backfill``."""

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
    list_filter = ("state",)
    ordering = ("name",)
    actions = ("pause_selected", "resume_selected")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """Every field: a backfill's row is written by its pass and the verbs only."""
        return [field.name for field in Backfill._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Rows come from declarations and passes, never from a form."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deleting the row would make a done backfill pending again: refused."""
        return False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the state filter (any other lookup is a 400, as on the jobs list)."""
        return lookup in _LOOKUPS

    @admin.display(description="rows done / total")
    def progress(self, row: Backfill) -> str:
        """``12,000 / 200,000 (6%)``."""
        if row.total is None:
            return f"{row.rows_done:,} / ?"
        share = min(100, 100 * row.rows_done // row.total) if row.total else 100
        return f"{row.rows_done:,} / {row.total:,} ({share}%)"

    @admin.action(permissions=["change"], description="Pause selected backfills")
    def pause_selected(
        self, request: HttpRequest, queryset: QuerySet[Backfill]
    ) -> None:
        """Stop each pass before its next page."""
        self._apply(request, queryset, pause_backfill, "paused")

    @admin.action(permissions=["change"], description="Resume selected backfills")
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[Backfill]
    ) -> None:
        """Queue a pass that goes on after the last row done."""
        self._apply(request, queryset, resume_backfill, "resumed")

    def _apply(
        self,
        request: HttpRequest,
        queryset: QuerySet[Backfill],
        verb: Callable[[str], Any],
        past: str,
    ) -> None:
        done: list[tuple[str, str]] = []
        for name in queryset.values_list("name", flat=True):
            try:
                verb(name)
            except JobsError as error:
                messages.error(request, f"{name}: {error.render()}")
            else:
                done.append((name, f"backfill {name}"))
        log_operator_action(
            request, Backfill, done, flag=CHANGE, message=f"Backfill {past} (admin)"
        )
        if done:
            messages.success(request, f"{len(done)} backfill(s) {past}.")
