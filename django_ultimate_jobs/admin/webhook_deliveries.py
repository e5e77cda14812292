"""The read-only delivery pages: outbound deliveries (with replay) and inbound.

A delivery's page lists every attempt (when, status, duration, error) and
the body sent (escaped); "Replay" needs ``replay_webhookdelivery``, confirms
first and logs each delivery to ``LogEntry``. Inbound deliveries are the
receivers' replay guard, listed read-only. The helpers that refuse
query-string input no row can hold (``?e=1``, 404) serve the endpoint pages
too.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.contrib.admin.views.main import ERROR_FLAG
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ..errors import JobsError
from ..models import InboundDelivery, Job, WebhookDelivery
from ..webhooks.declaration import replay
from .audit import confirmation, is_confirmed, log_operator_action, require

__all__ = [
    "InboundDeliveryAdmin",
    "WebhookDeliveryAdmin",
    "parse_object_id",
    "refuse_bad_filters",
]

_BODY_SHOWN = 10_000


def refuse_bad_filters(
    request: HttpRequest, allowed: dict[str, frozenset[str] | None]
) -> HttpResponse | None:
    """Redirect to ``?e=1`` when a filter value is not one the list offers.

    ``None`` allows any whole number (an id).
    """
    if ERROR_FLAG in request.GET:
        return None
    for key, values in allowed.items():
        if key not in request.GET:
            continue
        value = request.GET[key]
        ok = value.isdigit() and value.isascii() if values is None else value in values
        if not ok:
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
    return None


def parse_object_id(object_id: str) -> int:
    if not (object_id.isdigit() and object_id.isascii()) or len(object_id) > 18:
        raise Http404("no such object")
    return int(object_id)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only deliveries with their attempts; replay for ``replay_webhookdelivery``."""

    list_display = (
        "id",
        "endpoint_link",
        "topic",
        "msg_id",
        "state",
        "attempts",
        "last_status",
        "last_attempt_at",
        "created_at",
    )
    list_filter = ("state",)
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    actions = ("replay_selected",)
    fields = (
        "endpoint_link",
        "webhook",
        "topic",
        "msg_id",
        "state",
        "attempts",
        "last_status",
        "last_error",
        "last_attempt_at",
        "delivered_at",
        "replays",
        "job_link",
        "created_at",
        "attempt_table",
        "body_shown",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """The list never reads bodies or attempt logs."""
        rows = super().get_queryset(request).select_related("endpoint")
        return rows.defer("body", "attempt_log", "endpoint__secret")

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """The state filter and an endpoint id."""
        return lookup in ("state", "state__exact", "endpoint__id__exact")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list; a filter value no row can hold redirects to ``?e=1``."""
        states = frozenset(WebhookDelivery.State.values)
        refused = refuse_bad_filters(
            request,
            {"state": states, "state__exact": states, "endpoint__id__exact": None},
        )
        return refused or super().changelist_view(request, extra_context)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        """The row; an id that is no number is a 404."""
        return super().get_object(request, str(parse_object_id(object_id)), from_field)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Deliveries come from ``deliver()`` only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Read-only; replay has its own permission."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Retention deletes them."""
        return False

    def has_replay_permission(self, request: HttpRequest) -> bool:
        """``ultimate_jobs.replay_webhookdelivery``."""
        return bool(request.user.has_perm("ultimate_jobs.replay_webhookdelivery"))

    @admin.display(description="endpoint")
    def endpoint_link(self, delivery: WebhookDelivery) -> str:
        """The endpoint, linked."""
        return format_html(
            '<a href="{}">{}</a>',
            reverse(
                "admin:ultimate_jobs_webhookendpoint_change",
                args=[delivery.endpoint_id],
            ),
            str(delivery.endpoint),
        )

    @admin.display(description="job")
    def job_link(self, delivery: WebhookDelivery) -> str:
        """The latest send's job, linked while it exists."""
        if (
            delivery.job_id is None
            or not Job.objects.filter(id=delivery.job_id).exists()
        ):
            return "—"
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:ultimate_jobs_job_change", args=[str(delivery.job_id)]),
            str(delivery.job_id),
        )

    @admin.display(description="attempts")
    def attempt_table(self, delivery: WebhookDelivery) -> str:
        """Every attempt: when, status, duration, error."""
        log = delivery.attempt_log or []
        if not log:
            return "none yet"
        return format_html(
            '<table class="uj-attempts"><thead><tr><th>#</th><th>at</th>'
            "<th>status</th><th>duration</th><th>error</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td><td>{}</td></tr>",
                (
                    (
                        entry.get("attempt"),
                        entry.get("at"),
                        entry.get("status")
                        if entry.get("status") is not None
                        else "no answer",
                        entry.get("duration_ms"),
                        entry.get("error") or "—",
                    )
                    for entry in log
                ),
            ),
        )

    @admin.display(description="body sent")
    def body_shown(self, delivery: WebhookDelivery) -> str:
        """The body (escaped; the first 10,000 characters)."""
        body = delivery.body
        more = (
            f" … ({len(body):,} characters in all)" if len(body) > _BODY_SHOWN else ""
        )
        return format_html('<pre class="uj-pre">{}{}</pre>', body[:_BODY_SHOWN], more)

    @admin.action(permissions=["replay"], description="Replay selected deliveries")
    def replay_selected(
        self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]
    ) -> HttpResponse | None:
        """Send each selected delivery again (same webhook-id), as a new job."""
        require(request, "replay_webhookdelivery")
        rows = list(queryset.order_by("id")[:1000])
        if not is_confirmed(request):
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"Replay {len(rows)} deliver(ies)?",
                    "summary": (
                        "Each is sent again with its webhook-id, so a receiver "
                        "that dedupes on it processes it at most once."
                    ),
                    "verb_label": "Replay",
                    "jobs": [(str(row.pk), str(row)) for row in rows],
                    "action": "replay_selected",
                    "selected": [str(row.pk) for row in rows],
                },
            )
        done = []
        for row in rows:
            try:
                replay(row)
            except JobsError as error:
                messages.error(request, f"delivery {row.pk}: {error.render()}")
            else:
                done.append((str(row.pk), str(row)))
        log_operator_action(
            request, WebhookDelivery, done, flag=CHANGE, message="Replayed (admin)"
        )
        if done:
            messages.success(request, f"{len(done)} deliver(ies) queued again.")
        return None


@admin.register(InboundDelivery)
class InboundDeliveryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only: the ids each receiver took (its replay guard)."""

    list_display = (
        "id",
        "receiver",
        "webhook_id",
        "signed_at",
        "received_at",
        "size",
        "job_id",
    )
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """No lookup from the query string."""
        return False

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        """The row; an id that is no number is a 404."""
        return super().get_object(request, str(parse_object_id(object_id)), from_field)

    def _never(self, request: HttpRequest, obj: Any = None) -> bool:
        """Rows are written by receivers and swept by retention only."""
        return False

    has_add_permission = has_change_permission = has_delete_permission = _never
