"""The Consumers page: each stream consumer's cursor and progress; pause, resume.

A read-only list of the ``Consumer`` rows (filter by state) and a
read-only page per row. Pause and resume are list actions offered only to
holders of ``ultimate_jobs.change_consumer``, checked again on the POST
that acts (403 without it); each renders a confirmation page first, acts
on the confirming POST through :mod:`django_ultimate_jobs.consumers`
(as the command does), and logs each consumer acted on to ``LogEntry``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from ..consumers import pause_consumer, resume_consumer
from ..models import Consumer
from ..validation import storable
from .named import apply_by_name

__all__ = ["ConsumerAdmin"]

_LOOKUPS = frozenset({"state", "state__exact"})
_PERMISSION = "ultimate_jobs.change_consumer"
# Action -> (its label, what the log and the message say was done, the verb).
_VERBS: dict[str, tuple[str, str, Callable[[str], None]]] = {
    "pause_selected": ("Pause", "paused", pause_consumer),
    "resume_selected": ("Resume", "resumed", resume_consumer),
}


@admin.register(Consumer)
class ConsumerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Consumers: cursor, counts, last batch; pause / resume for ``change_consumer``."""

    list_display = (
        "name",
        "state",
        "shown_cursor",
        "items_done",
        "batches_done",
        "run_items",
        "last_batch_at",
        "updated_at",
        "error",
    )
    list_filter = ("state",)
    ordering = ("name",)
    actions = ("pause_selected", "resume_selected")

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Rows come from declarations and runs, never from a form."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """No field is editable here: the cursor moves with its batches only
        (``jobs_consumer NAME --set-cursor`` sets it on purpose)."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deleting the row would send the consumer back to its start cursor."""
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Pause and resume: ``ultimate_jobs.change_consumer``."""
        return bool(request.user.has_perm(_PERMISSION))

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the state filter (any other lookup is a 400)."""
        return lookup in _LOOKUPS and value in Consumer.State.values

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Consumer | None:
        """The row, or a 404 for a name no row can hold (a NUL)."""
        if not storable(object_id):
            raise Http404("no such consumer")
        return super().get_object(request, object_id, from_field)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list; a verb posted without the permission is a 403."""
        if request.method == "POST" and request.POST.get("action") in _VERBS:
            # The action filter hides the verbs; this refuses a POST naming one.
            if not self.has_operate_permission(request):
                raise PermissionDenied(f"needs the {_PERMISSION} permission")
        return super().changelist_view(request, extra_context)

    @admin.display(description="cursor")
    def shown_cursor(self, row: Consumer) -> str:
        """The cursor as JSON, cut at 80 characters."""
        text = json.dumps(row.cursor)
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.action(permissions=["operate"], description="Pause selected consumers")
    def pause_selected(
        self, request: HttpRequest, queryset: QuerySet[Consumer]
    ) -> HttpResponse | None:
        """Stop each before its next batch commits (after a confirmation page)."""
        return self._apply(request, queryset, "pause_selected")

    @admin.action(permissions=["operate"], description="Resume selected consumers")
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[Consumer]
    ) -> HttpResponse | None:
        """Let the supervisor start each again, a halted one's error cleared
        (after a confirmation page)."""
        return self._apply(request, queryset, "resume_selected")

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[Consumer], action: str
    ) -> HttpResponse | None:
        label, past, verb = _VERBS[action]
        return apply_by_name(
            self,
            request,
            queryset,
            action=action,
            label=label,
            past=past,
            noun="consumer",
            verb=verb,
        )
