"""Ledger postings and lines: read-only lists and a balances page.

Nothing here writes: postings are written by ``ledger()`` jobs only, and the
database refuses UPDATE and DELETE on both tables anyway. The lists filter
on account, currency and posting key, and take no other lookup from the
query string (as :class:`~.jobs.JobAdmin` does). No filter lists its values
(a ``SELECT DISTINCT`` over every line on each page): the balances page
links each account and currency to its lines. A value PostgreSQL cannot
hold (a NUL, a lone surrogate) redirects to ``?e=1`` as any invalid filter
does. The balances page takes ``account``, ``currency`` and ``tenant`` only.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, SEARCH_VAR
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from ..errors import LedgerEntryInvalid
from ..ledger import Money, model_book
from ..models import LedgerLine, LedgerPosting
from ..validation import storable
from .filters import ChosenValueFilter
from .guards import ListGuard, searchable

__all__ = ["LedgerLineAdmin", "LedgerPostingAdmin"]

# The query-string parameters the filters below take; nothing else. The
# ``__exact`` forms are those of the earlier enumerating filters (bookmarks).
LINE_LOOKUPS = frozenset({"account", "account__exact", "currency", "currency__exact"})
POSTING_LOOKUPS = frozenset({"tenant", "tenant__exact"})
BALANCE_PARAMETERS = ("account", "currency", "tenant")
"""The balances page's query-string parameters (and ``e``, its error flag)."""


def _storable_query(request: HttpRequest) -> bool:
    # PostgreSQL refuses a NUL or a lone surrogate in a parameter with a
    # DataError (a 500); no row can hold one anyway.
    return all(storable(v) for _, values in request.GET.lists() for v in values)


class _ReadOnly:
    """No add, no change, no delete: postings are written by jobs only."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Postings are written by ``ledger()`` jobs, never typed in."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A stored posting never changes: corrections are new postings."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The table is append-only (its trigger refuses DELETE too)."""
        return False


class _List(ListGuard, _ReadOnly):
    """A read-only list whose query string holds only storable text (a
    value no row can hold redirects to ``?e=1``, see :class:`ListGuard`)."""

    def invalid_query(self, request: HttpRequest) -> bool:
        """The filters' values, and the search: an exact key, so a key no
        posting can hold is an invalid filter too (not the search form's
        message the jobs list shows)."""
        term = request.GET.get(SEARCH_VAR, "")
        return super().invalid_query(request) or not searchable(term)


def _by_key(
    queryset: QuerySet[Any], search_term: str, field: str
) -> tuple[QuerySet[Any], bool]:
    # An exact key: a LIKE over every key would scan the table. A term no
    # key can hold (a NUL, from the autocomplete endpoint) matches nothing.
    term = search_term.strip()
    if not term:
        return queryset, False
    if not searchable(term):
        return queryset.none(), False
    return queryset.filter(**{field: term}), False


class AccountFilter(ChosenValueFilter):
    """``?account=``: set from the balances page (accounts are not enumerable)."""

    title = "account"
    parameter_name = "account"
    field = "account"


class CurrencyFilter(ChosenValueFilter):
    """``?currency=``: set from the balances page, as the account is."""

    title = "currency"
    parameter_name = "currency"
    field = "currency"


class PostingTenantFilter(ChosenValueFilter):
    """``?tenant=``: a posting's tenant, shown only when set."""

    title = "tenant"
    parameter_name = "tenant"
    field = "tenant"


class LedgerLineInline(_ReadOnly, admin.TabularInline):  # type: ignore[type-arg]
    """A posting's lines, in order."""

    model = LedgerLine
    fields = ("line", "account", "currency", "minor", "amount")
    readonly_fields = fields
    ordering = ("line",)
    extra = 0

    @admin.display(description="amount")
    def amount(self, line: LedgerLine) -> str:
        """The amount in the currency's decimals (``-12.34 EUR``)."""
        return _amount(line)


@admin.register(LedgerPosting)
class LedgerPostingAdmin(_List, admin.ModelAdmin):  # type: ignore[type-arg]
    """Postings, newest first; search by exact key; lines inline."""

    list_display = ("key", "tenant", "ledger", "line_count", "posted_at")
    list_filter = (PostingTenantFilter,)
    search_fields = ("key",)
    search_help_text = "An exact posting key."
    ordering = ("-id",)
    show_facets = admin.ShowFacets.NEVER
    inlines = (LedgerLineInline,)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the tenant filter's own parameter."""
        return lookup in POSTING_LOOKUPS

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Postings whose key is exactly the term."""
        return _by_key(queryset, search_term, "key")


@admin.register(LedgerLine)
class LedgerLineAdmin(_List, admin.ModelAdmin):  # type: ignore[type-arg]
    """Lines, newest first; filter by account and currency, search by key."""

    list_display = ("posting_key", "line", "account", "amount", "posted_at")
    list_filter = (CurrencyFilter, AccountFilter)
    list_select_related = ("posting",)
    search_fields = ("posting__key",)
    search_help_text = "An exact posting key."
    ordering = ("-id",)
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "admin/django_ultimate_jobs/ledger_line_list.html"

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the account and currency filters' parameters.

        The default takes any lookup on any column from the query string
        (``?posting__fingerprint__startswith=a``); refused, the list answers
        400.
        """
        return lookup in LINE_LOOKUPS

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Lines of the posting whose key is exactly the term."""
        return _by_key(queryset, search_term, "posting__key")

    @admin.display(description="posting", ordering="posting__key")
    def posting_key(self, line: LedgerLine) -> str:
        """The posting's key."""
        return line.posting.key

    @admin.display(description="amount")
    def amount(self, line: LedgerLine) -> str:
        """The amount in the currency's decimals (``-12.34 EUR``)."""
        return _amount(line)

    def get_urls(self) -> list[URLPattern]:
        """The list's URLs plus ``balances/``."""
        balances = path(
            "balances/",
            self.admin_site.admin_view(self.balances_view),
            name="ultimate_jobs_ledgerline_balances",
        )
        return [balances, *super().get_urls()]

    def balances_view(self, request: HttpRequest) -> HttpResponse:
        """Balances per account and currency: ``?account=``, ``?currency=``,
        ``?tenant=`` narrow them.

        Raises:
            DisallowedModelAdminLookup: another parameter (a 400, as the
                lists answer an unknown lookup).
        """
        if not self.has_view_permission(request):
            raise PermissionDenied
        unknown = set(request.GET) - {*BALANCE_PARAMETERS, ERROR_FLAG}
        if unknown:
            raise DisallowedModelAdminLookup(
                f"the balances page takes no parameter {sorted(unknown)[0]!r}"
            )
        chosen = {name: request.GET.get(name) or None for name in BALANCE_PARAMETERS}
        try:
            if not _storable_query(request):
                raise IncorrectLookupParameters("a value PostgreSQL cannot hold")
            balances = model_book(self.model).balances(
                chosen["account"], currency=chosen["currency"], tenant=chosen["tenant"]
            )
        except (IncorrectLookupParameters, LedgerEntryInvalid):
            # As a list answers an invalid filter: back to the page, ?e=1.
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Ledger balances",
            **chosen,
            "invalid": ERROR_FLAG in request.GET,
            "balances": balances,
        }
        return TemplateResponse(
            request, "admin/django_ultimate_jobs/ledger_balances.html", context
        )


def _amount(line: LedgerLine) -> str:
    # As stored: a page shows a row written around the book, never a 500.
    return str(Money.stored(line.minor, line.currency))
