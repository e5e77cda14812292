"""The Backfills page: each declared backfill's progress; pause and resume.

A read-only list of the ``Backfill`` rows (filter by state) and a read-only
page per row. Pause and resume are list actions: offered only to holders of
``ultimate_jobs.change_backfill``, checked again on every POST (403 without
it), each renders a confirmation page first and acts on the confirming POST,
and each backfill acted on is logged to ``LogEntry``. Both go through
:mod:`django_ultimate_jobs.backfills`, like the command. Input no row can
hold (a NUL, a state that does not exist) is answered as on the jobs list:
``?e=1`` for a filter, 404 for a page, a coded message for an action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from ..backfills import pause_backfill, resume_backfill
from ..errors import BackfillUnknown, JobsError
from ..models import Backfill
from ..validation import storable
from .audit import confirmation, is_confirmed, log_operator_action
from .guards import ListGuard
from .redacted import redacted_block

__all__ = ["BackfillAdmin"]

# The state filter's own parameters; nothing else reaches the query string.
_LOOKUPS = frozenset({"state", "state__exact"})
_STATES = frozenset(Backfill.State.values)
# Action -> (its label, what the log and the message say was done).
_VERBS = {
    "pause_selected": ("Pause", "paused"),
    "resume_selected": ("Resume", "resumed"),
}
_PERMISSION = "ultimate_jobs.change_backfill"


@admin.register(Backfill)
class BackfillAdmin(ListGuard, admin.ModelAdmin):
    """Backfills: progress per name; pause / resume for ``change_backfill``."""

    choice_parameters = dict.fromkeys(_LOOKUPS, _STATES)

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
    # The cursor holds the last row's key values: shown through redact().
    exclude = ("cursor",)
    readonly_fields = ("redacted_cursor",)
    ordering = ("name",)
    actions = ("pause_selected", "resume_selected")

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Rows come from declarations and passes, never from a form."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """No field is editable (a POST to the page is a 403); the verbs
        have their own check, :meth:`has_operate_permission`."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deleting the row would make a done backfill pending again: refused."""
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Pause and resume: ``ultimate_jobs.change_backfill``."""
        return bool(request.user.has_perm(_PERMISSION))

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the state filter (any other lookup is a 400, as on the jobs list)."""
        return lookup in _LOOKUPS

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Backfill | None:
        """The row, or a 404 for an id no row can hold (a NUL)."""
        if not storable(object_id):
            raise Http404("no such backfill")
        return super().get_object(request, object_id, from_field)

    def selection_problem(self, value: str) -> JobsError | None:
        """A selected name no row can hold (a NUL): ``X_BACKFILL_UNKNOWN``."""
        if storable(value):
            return None
        return BackfillUnknown(
            f"no backfill can be named {value!r}", meta={"backfill": value}
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list (a bad state filter redirects to ``?e=1``, see
        :class:`ListGuard`); a verb posted without the permission is a 403."""
        if request.method == "POST" and request.POST.get("action") in _VERBS:
            # The action filter hides the verbs; this refuses a POST naming one.
            if not self.has_operate_permission(request):
                raise PermissionDenied(f"needs the {_PERMISSION} permission")
        return super().changelist_view(request, extra_context)

    @admin.display(description="cursor")
    def redacted_cursor(self, row: Backfill) -> str:
        """Where the pass stands, ``REDACT_KEYS`` values shown as ``[redacted]``."""
        return redacted_block(row.cursor)

    @admin.display(description="rows done / total")
    def progress(self, row: Backfill) -> str:
        """``12,000 / 200,000 (6%)``."""
        if row.total is None:
            return f"{row.rows_done:,} / ?"
        share = min(100, 100 * row.rows_done // row.total) if row.total else 100
        return f"{row.rows_done:,} / {row.total:,} ({share}%)"

    @admin.action(permissions=["operate"], description="Pause selected backfills")
    def pause_selected(
        self, request: HttpRequest, queryset: QuerySet[Backfill]
    ) -> HttpResponse | None:
        """Stop each pass before its next page (after a confirmation page)."""
        return self._apply(request, queryset, "pause_selected", pause_backfill)

    @admin.action(permissions=["operate"], description="Resume selected backfills")
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[Backfill]
    ) -> HttpResponse | None:
        """Queue a pass that goes on after the last row done (after a
        confirmation page)."""
        return self._apply(request, queryset, "resume_selected", resume_backfill)

    def _apply(
        self,
        request: HttpRequest,
        queryset: QuerySet[Backfill],
        action: str,
        verb: Callable[[str], Any],
    ) -> HttpResponse | None:
        names = list(queryset.values_list("name", flat=True))
        label, past = _VERBS[action]
        if not names:
            # Nothing to confirm: no "0 backfill(s)?" page, no empty log.
            gone = BackfillUnknown("none of the selected backfills has a row")
            messages.error(request, gone.render())
            return None
        if not is_confirmed(request):
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"{label} {len(names)} backfill(s)?",
                    "verb_label": label,
                    "jobs": [(name, name) for name in names],
                    "action": action,
                    "selected": names,
                },
            )
        done: list[tuple[str, str]] = []
        for name in names:
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
        return None
