"""The read-only delivery pages: outbound deliveries (with replay) and inbound.

A delivery's page lists every attempt (when, status, duration, error) and
the body sent (escaped); "Replay" needs ``replay_webhookdelivery``, confirms
first and logs each delivery to ``LogEntry``. Inbound deliveries are the
receivers' replay guard, listed read-only. Input no row can hold is refused
as on every list (:class:`~.guards.ListGuard`: ``?e=1`` for a filter, a
coded message for a selection, 404 for a page), never a 500. A JSON body is
shown through ``redact()``.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ..errors import JobsError
from ..models import InboundDelivery, Job, WebhookDelivery
from ..redaction import redacted_json
from ..webhooks.declaration import replay
from ..webhooks.errors import WebhookEventUnknown
from .audit import confirmation, is_confirmed, log_operator_action, require
from .guards import ListGuard, whole_number

__all__ = [
    "InboundDeliveryAdmin",
    "WebhookDeliveryAdmin",
    "parse_object_id",
]

_BODY_SHOWN = 10_000


def parse_object_id(object_id: str) -> int:
    """The integer key in a page's URL; one no row can have is a 404."""
    if not whole_number(object_id):
        raise Http404("no such object")
    return int(object_id)


_STATES = frozenset(WebhookDelivery.State.values)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ListGuard, admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only deliveries with their attempts; replay for ``replay_webhookdelivery``."""

    choice_parameters = {"state": _STATES, "state__exact": _STATES}
    id_parameters = frozenset({"endpoint__id__exact"})

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

    def unknown(self, value: str) -> JobsError:
        """``X_WEBHOOK_EVENT_UNKNOWN``: a selected id no delivery can have."""
        return WebhookEventUnknown(
            f"no webhook delivery can have the id {value!r}",
            fix="select deliveries from the list",
        )

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
        """The body (escaped; the first 10,000 characters); a JSON body is
        shown through ``redact()``, as every page shows job data."""
        body = _redacted_body(delivery.body)
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
        if not rows:
            # Nothing to confirm: no "0 deliveries?" page, no empty log.
            messages.error(request, self.unknown("").render())
            return None
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


def _redacted_body(body: str) -> str:
    """A JSON body redacted (``REDACT_KEYS``); any other body as sent."""
    try:
        value = json.loads(body)
    except ValueError:
        return body
    return redacted_json(value) if isinstance(value, dict | list) else body


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
