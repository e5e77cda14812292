"""The Consumers page: each stream consumer's cursor and progress; pause, resume.

A read-only list of the ``Consumer`` rows (filter by state) and a
read-only page per row. Pause and resume are list actions offered only to
holders of ``ultimate_jobs.change_consumer``, checked again on the POST
that acts (403 without it); each renders a confirmation page first, acts
on the confirming POST through :mod:`django_ultimate_jobs.consumers`
(as the command does), and logs each consumer acted on to ``LogEntry``.
Input no row can hold is refused as on every list
(:class:`~.guards.ListGuard`), and the cursor is shown through
``redact()``, on the list and on the page.
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
from ..consumers.errors import ConsumerUnknown
from ..errors import JobsError
from ..models import Consumer
from ..redaction import redact
from ..validation import storable
from .guards import ListGuard
from .named import apply_by_name
from .redacted import redacted_block

__all__ = ["ConsumerAdmin"]

_LOOKUPS = frozenset({"state", "state__exact"})
_STATES = frozenset(Consumer.State.values)
_CURSOR_SHOWN = 80
_PERMISSION = "ultimate_jobs.change_consumer"
# Action -> (its label, what the log and the message say was done, the verb).
_VERBS: dict[str, tuple[str, str, Callable[[str], None]]] = {
    "pause_selected": ("Pause", "paused", pause_consumer),
    "resume_selected": ("Resume", "resumed", resume_consumer),
}


@admin.register(Consumer)
class ConsumerAdmin(ListGuard, admin.ModelAdmin):  # type: ignore[type-arg]
    """Consumers: cursor, counts, last batch; pause / resume for ``change_consumer``."""

    choice_parameters = dict.fromkeys(_LOOKUPS, _STATES)

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
    # The cursor is shown through redact(), never as stored.
    exclude = ("cursor",)
    readonly_fields = ("redacted_cursor",)

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
        """Only the state filter (any other lookup is a 400; a value outside
        the states is refused by :class:`ListGuard`)."""
        return lookup in _LOOKUPS

    def unknown(self, value: str) -> JobsError:
        """``X_CONSUMER_UNKNOWN``: a selected name no consumer can have."""
        return ConsumerUnknown(
            f"no consumer can be named {value!r}", meta={"consumer": value}
        )

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
        """The cursor redacted, as JSON cut at 80 characters."""
        text = json.dumps(redact(row.cursor), ensure_ascii=False, default=str)
        return text if len(text) <= _CURSOR_SHOWN else text[: _CURSOR_SHOWN - 1] + "…"

    @admin.display(description="cursor")
    def redacted_cursor(self, row: Consumer) -> str:
        """Where the consumer stands, ``REDACT_KEYS`` values shown as ``[redacted]``."""
        return redacted_block(row.cursor)

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
            nothing=self.unknown(""),
        )
