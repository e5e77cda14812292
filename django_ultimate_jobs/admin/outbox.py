"""Outbox messages: a read-only list (pending, claimed, claim lapsed,
published, failed). A message that can never be published is discarded with
``manage.py jobs outbox-discard <id>``.

Messages are written by the enqueue and retired by the relay only; the
page shows where each one is and, for one whose publish failed, the error
and how many publishes failed. The rows live in ``OUTBOX_DATABASE``, which
the list reads.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from ..conf import jobs_settings
from ..models import OutboxMessage
from ..outbox.operator import status as outbox_status
from .guards import ListGuard
from .redacted import redacted_block

__all__ = ["OutboxMessageAdmin"]

STATUSES = ("pending", "claimed", "published", "failed")
"""The status filter's choices (another value redirects to ``?e=1``)."""


class StatusFilter(admin.SimpleListFilter):
    """Pending (unclaimed), claimed, published, failed (a publish failed)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The four statuses a message can be in."""
        return [(status, status) for status in STATUSES]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> QuerySet[Any] | None:
        """Messages in the chosen status."""
        value = self.value()
        if value == "pending":
            return queryset.filter(published_at=None, claimed_at=None)
        if value == "claimed":
            return queryset.filter(published_at=None, claimed_at__isnull=False)
        if value == "published":
            return queryset.filter(published_at__isnull=False)
        if value == "failed":
            return queryset.filter(published_at=None, attempts__gt=0)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ListGuard, admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only: messages are staged by enqueues and retired by the relay."""

    choice_parameters = {StatusFilter.parameter_name: frozenset(STATUSES)}

    list_display = (
        "id",
        "name",
        "queue",
        "status",
        "staged_at",
        "claimed_by",
        "published_at",
        "attempts",
        "last_error",
    )
    list_filter = (StatusFilter,)
    # The JSON columns are shown through redact(), never as stored.
    exclude = ("input", "extra")
    readonly_fields = ("redacted_input", "redacted_extra")
    ordering = ("-staged_at", "-id")
    list_per_page = 50
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """The messages of ``OUTBOX_DATABASE``."""
        return super().get_queryset(request).using(jobs_settings().outbox_database)

    @admin.display(description="input")
    def redacted_input(self, message: OutboxMessage) -> str:
        """The job's input, ``REDACT_KEYS`` values shown as ``[redacted]``."""
        return redacted_block(message.input)

    @admin.display(description="extra")
    def redacted_extra(self, message: OutboxMessage) -> str:
        """The enqueue's other options, redacted as the input is."""
        return redacted_block(message.extra)

    @admin.display(description="status")
    def status(self, message: OutboxMessage) -> str:
        """Where the message is: published, claimed, claim lapsed, failed or
        pending (a lapsed claim: its relay died or is stuck past the lease)."""
        return outbox_status(message)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """No lookup from the query string but the status filter's own.

        The default takes any lookup on any column (``?input__regex=...``).
        """
        return lookup == StatusFilter.parameter_name

    def _never(self, request: HttpRequest, obj: Any = None) -> bool:
        """Messages are staged by enqueues and moved by the relay only
        (deleting a pending one would lose its job; retention sweeps)."""
        return False

    has_add_permission = has_change_permission = has_delete_permission = _never
