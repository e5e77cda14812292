"""List filters that never ``SELECT DISTINCT`` over a big table.

Their choices come from what is declared (job states, the registry's job
names and queues, the ``QUEUES`` setting), so a filter sidebar costs no
query however many rows there are. Their parameters,
:data:`FILTER_PARAMETERS`, are the only lookups the jobs list takes from
its query string.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from ..conf import jobs_settings
from ..registry import registered_jobs
from ..states import JobState
from ..validation import storable

__all__ = [
    "FILTER_PARAMETERS",
    "LIST_FILTERS",
    "ChosenValueFilter",
    "NameFilter",
    "QueueFilter",
    "StateFilter",
    "TenantFilter",
]

_STATES = frozenset(state.value for state in JobState)


class _ExactFilter(admin.SimpleListFilter):
    field = ""

    def accepts(self, value: str) -> bool:
        """Whether a row could hold ``value``: PostgreSQL takes no NUL or
        lone surrogate in a parameter."""
        return storable(value)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Filter on the field when a value is chosen.

        Raises:
            IncorrectLookupParameters: no row can hold the value (see
                :meth:`accepts`); the changelist answers it as Django does
                any invalid filter (a redirect to ``?e=1``), not with a 500
                or an empty list.
        """
        value = self.value()
        if not value:
            return queryset
        if not self.accepts(value):
            raise IncorrectLookupParameters(f"the {self.parameter_name} filter")
        return queryset.filter(**{self.field: value})


class StateFilter(_ExactFilter):
    """Every job state."""

    title = "state"
    parameter_name = "state"
    field = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The eight states, in lifecycle order."""
        return [(state.value, state.value) for state in JobState]

    def accepts(self, value: str) -> bool:
        """One of the eight states, spelled as stored (``dead``, not ``DEAD``)."""
        return value in _STATES


class QueueFilter(_ExactFilter):
    """Configured queues and the queues declared jobs use."""

    title = "queue"
    parameter_name = "queue"
    field = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Queues from settings and the registry, sorted."""
        names = set(jobs_settings().queues) | {h.queue for h in registered_jobs()}
        return [(name, name) for name in sorted(names)]


class NameFilter(_ExactFilter):
    """Job names declared in this process."""

    title = "job name"
    parameter_name = "name"
    field = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Registered job names, sorted."""
        return [(h.name, h.name) for h in sorted(registered_jobs(), key=str)]


class ChosenValueFilter(_ExactFilter):
    """A filter on a column whose values are not enumerable: shown only when set.

    Listing the values would be a ``SELECT DISTINCT`` over the whole table on
    every page; the value comes from a link instead (the jobs list's tenant
    column, the ledger balances' accounts and currencies) or the URL.
    """

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The chosen value only, so the sidebar shows it (and "All" clears it)."""
        value = self.value()
        return [(value, value)] if value else []


class TenantFilter(ChosenValueFilter):
    """``?tenant=<id>``: shown only when set (tenants are not enumerable)."""

    title = "tenant"
    parameter_name = "tenant"
    field = "tenant_id"


LIST_FILTERS = (StateFilter, QueueFilter, NameFilter, TenantFilter)
# The query-string parameters the jobs list filters on: every other lookup
# is refused (JobAdmin.lookup_allowed).
FILTER_PARAMETERS = frozenset(f.parameter_name for f in LIST_FILTERS)
