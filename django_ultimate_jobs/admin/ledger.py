"""Ledger postings and lines: read-only lists and a balances page.

Nothing here writes: postings are written by ``ledger()`` jobs only, and the
database refuses UPDATE and DELETE on both tables anyway. The lists filter
on account, currency and posting key, and take no other lookup from the
query string (as :class:`~.jobs.JobAdmin` does).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from ..ledger import model_book
from ..models import LedgerLine, LedgerPosting

__all__ = ["LedgerLineAdmin", "LedgerPostingAdmin"]

# The query-string parameters the filters below produce; nothing else.
LINE_LOOKUPS = frozenset({"account", "account__exact", "currency", "currency__exact"})
POSTING_LOOKUPS = frozenset({"tenant", "tenant__exact"})


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


def _by_key(
    queryset: QuerySet[Any], search_term: str, field: str
) -> tuple[QuerySet[Any], bool]:
    # An exact key: a LIKE over every key would scan the table.
    term = search_term.strip()
    return (queryset.filter(**{field: term}) if term else queryset), False


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
class LedgerPostingAdmin(_ReadOnly, admin.ModelAdmin):  # type: ignore[type-arg]
    """Postings, newest first; search by exact key; lines inline."""

    list_display = ("key", "tenant", "ledger", "line_count", "posted_at")
    list_filter = ("tenant",)
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
class LedgerLineAdmin(_ReadOnly, admin.ModelAdmin):  # type: ignore[type-arg]
    """Lines, newest first; filter by account and currency, search by key."""

    list_display = ("posting_key", "line", "account", "amount", "posted_at")
    list_filter = ("currency", "account")
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
        """The balance of every account per currency (``?account=`` for one)."""
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        account = request.GET.get("account") or None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Ledger balances",
            "account": account,
            "balances": model_book(self.model).balances(account),
        }
        return TemplateResponse(
            request, "admin/django_ultimate_jobs/ledger_balances.html", context
        )


def _amount(line: LedgerLine) -> str:
    from ..ledger import Money

    return str(Money(line.minor, line.currency))
