"""Subject requests and the erase audit: read-only pages.

The requests page lists each export and erase with its progress (rows done
of the rows counted at its start), who asked, and the archive an export
wrote; a request's page shows its erase records inline. The audit page
lists every erase record (model, field, policy, rows, who asked), filtered
by subject, policy or sweep. Nothing here writes: requests come from
``export_subject()`` / ``erase_subject()`` (or ``jobs_subject``), records
from the erase itself, and the database refuses UPDATE and DELETE on the
records anyway. Only the list filters reach the query string, and none lists
its choices with a ``SELECT DISTINCT`` over the table: subjects and policies
come from the declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import Http404, HttpRequest

from ..models import ErasureRecord, SubjectRequest
from ..subjects import registered_subjects
from ..validation import storable
from .filters import ChosenValueFilter
from .redacted import redacted_block

__all__ = ["ErasureRecordAdmin", "SubjectRequestAdmin"]


def _one_of(values: list[str]) -> Callable[[str], bool]:
    return lambda value: value in values


def _any(value: str) -> bool:
    return True  # the filter itself answers a value no row can hold (?e=1)


# Each filter's parameters and the values a row can hold; nothing else
# reaches a query (another lookup, or such a value, is a 400). The subject
# and policy filters check their own values.
_REQUEST_LOOKUPS: dict[str, Callable[[str], bool]] = {
    **dict.fromkeys(("kind", "kind__exact"), _one_of(SubjectRequest.Kind.values)),
    **dict.fromkeys(("state", "state__exact"), _one_of(SubjectRequest.State.values)),
    "subject": _any,
}
_RECORD_LOOKUPS: dict[str, Callable[[str], bool]] = {
    **dict.fromkeys(("sweep", "sweep__exact"), _one_of(["0", "1"])),
    "subject": _any,
    "policy": _any,
}
_POLICIES = [
    "null",
    "empty",
    "redact",
    "value",
    "expression",
    "delete",
    "delete (cascade)",
]


class SubjectFilter(ChosenValueFilter):
    """``?subject=``: the declared subjects (never a ``SELECT DISTINCT``)."""

    title = "subject"
    parameter_name = "subject"
    field = "subject"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Every declared subject, and the chosen one if no longer declared."""
        names = [spec.name for spec in registered_subjects()]
        value = self.value()
        if value and value not in names:
            names.append(value)
        return [(name, name) for name in names]


class PolicyFilter(ChosenValueFilter):
    """``?policy=``: each policy, and the declared tables' ``retain`` reasons."""

    title = "policy"
    parameter_name = "policy"
    field = "policy"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The policy names, then each declared ``retain: <reason>``."""
        retained = {
            t.erase.describe()
            for spec in registered_subjects()
            for t in spec.tables
            if t.erase.kind == "retain"
        }
        return [(p, p) for p in [*_POLICIES, *sorted(retained)]]


class _ReadOnly:
    """No add, change or delete: these rows are written by jobs only."""

    lookups: dict[str, Callable[[str], bool]] = {}

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Requests come from the API or the command, never a form."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A request's row is its job's to write; the audit never changes."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """An erase's request anchors its audit records: never deleted here."""
        return False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list filters, with a value a row can hold (else a 400)."""
        check = self.lookups.get(lookup)
        return check is not None and check(value)


class ErasureRecordInline(_ReadOnly, admin.TabularInline):  # type: ignore[type-arg]
    """An erase's records, in the order they were written."""

    model = ErasureRecord
    fields = ("model", "field", "policy", "rows", "sweep", "recorded_at")
    readonly_fields = fields
    extra = 0


@admin.register(SubjectRequest)
class SubjectRequestAdmin(_ReadOnly, admin.ModelAdmin):  # type: ignore[type-arg]
    """Exports and erases: state, progress, who asked, the archive."""

    lookups = _REQUEST_LOOKUPS
    list_display = (
        "created_at",
        "kind",
        "subject",
        "state",
        "progress",
        "requested_by",
        "archive",
        "finished_at",
        "error",
    )
    list_filter = ("kind", "state", SubjectFilter)
    readonly_fields = (
        "id",
        "subject",
        "kind",
        "state",
        "key_digest",
        "requested_by",
        "storage",
        "archive",
        "job_id",
        "run_id",
        "rows_done",
        "pages_done",
        "total",
        "redacted_summary",
        "error",
        "created_at",
        "started_at",
        "finished_at",
        "updated_at",
    )
    # The key (while the request is live) is never shown: it may be an
    # email address, and the digest finds a subject's requests. The summary
    # is shown through redact(), never as stored.
    exclude = ("key", "summary")
    inlines = (ErasureRecordInline,)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> SubjectRequest | None:
        """The row, or a 404 for an id no row can hold (a NUL)."""
        if not storable(object_id):
            raise Http404("no such request")
        return super().get_object(request, object_id, from_field)

    @admin.display(description="summary")
    def redacted_summary(self, row: SubjectRequest) -> str:
        """What was done per table, ``REDACT_KEYS`` values shown as ``[redacted]``."""
        return redacted_block(row.summary)

    @admin.display(description="rows done / total")
    def progress(self, row: SubjectRequest) -> str:
        """``120 / 400 (30%)``."""
        if row.total is None:
            return f"{row.rows_done:,} / ?"
        share = min(100, 100 * row.rows_done // row.total) if row.total else 100
        return f"{row.rows_done:,} / {row.total:,} ({share}%)"


@admin.register(ErasureRecord)
class ErasureRecordAdmin(_ReadOnly, admin.ModelAdmin):  # type: ignore[type-arg]
    """The erase audit: what was erased, how, how many rows, on whose request."""

    lookups = _RECORD_LOOKUPS
    list_display = (
        "recorded_at",
        "subject",
        "model",
        "field",
        "policy",
        "rows",
        "requested_by",
        "sweep",
        "request",
    )
    list_filter = (SubjectFilter, PolicyFilter, "sweep")
    readonly_fields = list_display
