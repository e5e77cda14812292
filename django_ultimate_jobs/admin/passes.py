"""``PassAdmin``: the page of a kind of pass (backfills, reindexes, exports, imports).

A read-only list of the kind's progress rows (filter by state) and a
read-only page per row. Pause and resume are list actions: offered only to
holders of the kind's permission, checked again on every POST (403 without
it), each renders a confirmation page first and acts on the confirming
POST, and each row acted on is logged to ``LogEntry``. The verbs are the
kind's own (its module's ``pause_*`` / ``resume_*``), like its command's.
Input no row can hold (a NUL, a state that does not exist) is answered as
on the jobs list (:class:`~.guards.ListGuard`): ``?e=1`` for a filter, 404
for a page, a coded message for an action. The cursor (the last row's key
values) is shown through ``redact()``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from ..errors import JobsError
from ..keyset.state import PassState
from ..validation import storable
from .audit import confirmation, is_confirmed, log_operator_action
from .guards import ListGuard
from .humane import counted
from .redacted import redacted_block

__all__ = ["PASS_FIELDS", "PassAdmin"]

PASS_FIELDS = (
    "state",
    "redacted_cursor",
    "rows_done",
    "pages_done",
    "total",
    "run_id",
    "started_at",
    "finished_at",
    "updated_at",
    "error",
)
"""A progress row's own fields, in the order its page shows them."""

# The state filter's own parameters; nothing else reaches the query string.
_LOOKUPS = frozenset({"state", "state__exact"})
_STATES = frozenset(PassState.values)
# Action -> (its label, what the log and the message say was done).
_VERBS = {
    "pause_selected": ("Pause", "paused"),
    "resume_selected": ("Resume", "resumed"),
}


class PassAdmin(ListGuard, admin.ModelAdmin):
    """Progress rows of one kind of pass; pause / resume for its permission.

    A subclass names ``kind`` (``backfill``...), ``operate_permission``
    and implements :meth:`pause_row`, :meth:`resume_row` and
    :meth:`unknown`.
    """

    kind = "pass"
    operate_permission = ""
    list_filter = ("state",)
    choice_parameters = dict.fromkeys(_LOOKUPS, _STATES)
    readonly_fields: ClassVar[tuple[str, ...]] = ("redacted_cursor",)
    actions = ("pause_selected", "resume_selected")

    def pause_row(self, row: Any) -> None:
        """Pause the pass of ``row`` (raises its kind's coded error)."""
        raise NotImplementedError

    def resume_row(self, row: Any) -> Any:
        """Resume the pass of ``row`` (raises its kind's coded error)."""
        raise NotImplementedError

    def unknown(self, value: str) -> JobsError:
        """The coded error for a selected key no row can hold."""
        raise NotImplementedError

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Rows come from declarations and passes, never from a form."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """No field is editable (a POST to the page is a 403); the verbs
        have their own check, :meth:`has_operate_permission`."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deleting a row would forget how far (and whether) a pass got: refused."""
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Pause and resume: the kind's ``operate_permission``."""
        return bool(request.user.has_perm(self.operate_permission))

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the state filter (any other lookup is a 400, as on the jobs list)."""
        return lookup in _LOOKUPS

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        """The row, or a 404 for an id no row can hold (a NUL)."""
        if not storable(object_id):
            raise Http404(f"no such {self.kind}")
        return super().get_object(request, object_id, from_field)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list (a bad state filter or selection is refused by
        :class:`ListGuard`); a verb posted without the permission is a 403."""
        if request.method == "POST" and request.POST.get("action") in _VERBS:
            # The action filter hides the verbs; this refuses a POST naming one.
            if not self.has_operate_permission(request):
                raise PermissionDenied(
                    f"needs the {self.operate_permission} permission"
                )
        return super().changelist_view(request, extra_context)

    @admin.display(description="cursor")
    def redacted_cursor(self, row: Any) -> str:
        """Where the pass stands, ``REDACT_KEYS`` values shown as ``[redacted]``."""
        return redacted_block(row.cursor)

    @admin.display(description="rows done / total")
    def progress(self, row: Any) -> str:
        """``12,000 / 200,000 (6%)``."""
        if row.total is None:
            return f"{row.rows_done:,} / ?"
        share = min(100, 100 * row.rows_done // row.total) if row.total else 100
        return f"{row.rows_done:,} / {row.total:,} ({share}%)"

    @admin.action(
        permissions=["operate"], description="Pause selected %(verbose_name_plural)s"
    )
    def pause_selected(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse | None:
        """Stop each pass before its next page (after a confirmation page)."""
        return self._apply(request, queryset, "pause_selected")

    @admin.action(
        permissions=["operate"], description="Resume selected %(verbose_name_plural)s"
    )
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse | None:
        """Queue a pass that goes on after the last row done (after a
        confirmation page)."""
        return self._apply(request, queryset, "resume_selected")

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[Any], action: str
    ) -> HttpResponse | None:
        rows = list(queryset)
        label, past = _VERBS[action]
        if not rows:
            # Nothing to confirm: no "0 backfills?" page, no empty log.
            messages.error(request, self.unknown("").render())
            return None
        if not is_confirmed(request):
            keys = [str(row.pk) for row in rows]
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"{label} {counted(len(rows), self.kind)}?",
                    "verb_label": label,
                    "jobs": [(str(row.pk), str(row)) for row in rows],
                    "action": action,
                    "selected": keys,
                },
            )
        verb = self.pause_row if action == "pause_selected" else self.resume_row
        done: list[tuple[str, str]] = []
        for row in rows:
            try:
                verb(row)
            except JobsError as error:
                messages.error(request, f"{row}: {error.render()}")
            else:
                done.append((str(row.pk), str(row)))
        log_operator_action(
            request,
            self.model,
            done,
            flag=CHANGE,
            message=f"{self.kind.capitalize()} {past} (admin)",
        )
        if done:
            messages.success(request, f"{counted(len(done), self.kind)} {past}.")
        return None
