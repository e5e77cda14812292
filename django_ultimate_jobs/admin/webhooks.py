"""The webhook pages: endpoints (health at a glance), deliveries, inbound.

Endpoints: the list shows each one's state, last success, failure streak
and a bar of its latest 20 deliveries; adding one generates its secret and
shows it once (never again: every page masks it); "Rotate secret" (own
permission ``rotate_webhookendpoint``) and "Send a test event" (own
permission ``test_webhookendpoint``) are per-endpoint pages that confirm
first, act on the confirming POST and log to ``LogEntry``; enable and
disable are list actions for ``change_webhookendpoint``. The delivery
pages (attempts, replay) and the inbound list are in
:mod:`.webhook_deliveries`. Input no row can hold is refused the way the
other pages refuse it (:class:`~.guards.ListGuard`: ``?e=1`` for a filter,
a coded message for a selection, 404 for a page), never a 500.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from ..errors import JobsError
from ..models import WebhookDelivery, WebhookEndpoint
from ..webhooks.addresses import display_url
from ..webhooks.declaration import send_test
from ..webhooks.endpoints import (
    check_endpoint_fields,
    create_endpoint,
    disable_endpoint,
    enable_endpoint,
    rotate_secret,
)
from ..webhooks.errors import WebhookEndpointInvalid
from ..webhooks.signing import mask_secret
from .audit import confirmation, is_confirmed, log_operator_action, require
from .guards import ListGuard
from .humane import counted
from .webhook_deliveries import (
    InboundDeliveryAdmin,
    WebhookDeliveryAdmin,
    parse_object_id,
)

__all__ = ["InboundDeliveryAdmin", "WebhookDeliveryAdmin", "WebhookEndpointAdmin"]

HEALTH_BAR = 20
"""Deliveries shown in an endpoint's health bar (the latest ones)."""
_COLOURS = {"delivered": "#16a34a", "failed": "#dc2626", "pending": "#9ca3af"}


# -- endpoints ---------------------------------------------------------------


class EndpointForm(forms.ModelForm):
    """URL, description and topics (comma-separated); never the secret."""

    topics_text = forms.CharField(
        label="Topics",
        initial="*",
        help_text="Comma-separated topic names; * receives every topic.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("url", "description")
        widgets = {"url": forms.URLInput(attrs={"size": 80})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["topics_text"].initial = ", ".join(self.instance.topics)

    def clean(self) -> dict[str, Any]:
        """Check the URL and topics as the sender will (coded message on refusal)."""
        data = super().clean() or {}
        topics = [
            t.strip() for t in data.get("topics_text", "").split(",") if t.strip()
        ]
        try:
            data["topics"] = check_endpoint_fields(data.get("url") or "", topics)
        except JobsError as error:
            raise forms.ValidationError(error.render()) from None
        return data


class EnabledFilter(admin.SimpleListFilter):
    """Enabled or disabled endpoints."""

    title = "state"
    parameter_name = "enabled"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Yes / no."""
        return [("yes", "enabled"), ("no", "disabled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Endpoints in the chosen state."""
        if self.value() == "yes":
            return queryset.filter(disabled_at=None)
        if self.value() == "no":
            return queryset.exclude(disabled_at=None)
        return queryset


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ListGuard, admin.ModelAdmin):  # type: ignore[type-arg]
    """Endpoints: health at a glance; add (secret shown once), rotate, test."""

    choice_parameters = {EnabledFilter.parameter_name: frozenset({"yes", "no"})}

    form = EndpointForm
    list_display = (
        "id",
        "endpoint_url",
        "topic_list",
        "state",
        "last_success_at",
        "consecutive_failures",
        "health",
    )
    list_display_links = ("id", "endpoint_url")
    list_filter = (EnabledFilter,)
    ordering = ("id",)
    actions = ("enable_selected", "disable_selected")
    readonly_fields = (
        "masked_secret",
        "masked_previous_secret",
        "previous_secret_until",
        "disabled_at",
        "disabled_reason",
        "consecutive_failures",
        "last_success_at",
        "last_failure_at",
        "created_at",
        "operations",
        "recent_deliveries",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The editable fields, then (on the change page) the read-only ones."""
        fields = ["url", "description", "topics_text"]
        return fields if obj is None else [*fields, *self.readonly_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """None on the add page (the secret does not exist yet)."""
        return () if obj is None else self.readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Each endpoint with the states of its latest deliveries (one query)."""
        latest = WebhookDelivery.objects.filter(endpoint=OuterRef("pk")).order_by("-id")
        return (
            super()
            .get_queryset(request)
            .annotate(recent_states=ArraySubquery(latest.values("state")[:HEALTH_BAR]))
        )

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the state filter."""
        return lookup == EnabledFilter.parameter_name

    def unknown(self, value: str) -> JobsError:
        """``X_WEBHOOK_ENDPOINT_INVALID``: a selected id no endpoint can have."""
        return WebhookEndpointInvalid(
            f"no webhook endpoint can have the id {value!r}",
            fix="select endpoints from the list",
        )

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        """The row; an id that is no number is a 404, never a database error."""
        return super().get_object(request, str(parse_object_id(object_id)), from_field)

    # -- columns -------------------------------------------------------------

    @admin.display(description="URL")
    def endpoint_url(self, endpoint: WebhookEndpoint) -> str:
        """Origin and path (a query string may carry a token)."""
        return display_url(endpoint.url)

    @admin.display(description="topics")
    def topic_list(self, endpoint: WebhookEndpoint) -> str:
        """The topics, comma-separated."""
        return ", ".join(endpoint.topics)

    @admin.display(description="state")
    def state(self, endpoint: WebhookEndpoint) -> str:
        """Enabled, or disabled with its reason."""
        if endpoint.disabled_at is None:
            return "enabled"
        return format_html(
            '<span class="uj-error" title="{}">disabled</span>',
            endpoint.disabled_reason,
        )

    @admin.display(description=f"last {HEALTH_BAR} deliveries")
    def health(self, endpoint: WebhookEndpoint) -> str:
        """A bar, oldest to newest: green delivered, red failed, grey pending."""
        states = list(reversed(getattr(endpoint, "recent_states", None) or []))
        if not states:
            return "—"
        return format_html(
            '<span class="uj-health" style="white-space: nowrap">{}</span>',
            format_html_join(
                "",
                '<span title="{}" style="display:inline-block;width:6px;height:14px;'
                'margin-right:1px;background:{}"></span>',
                ((state, _COLOURS.get(state, "#9ca3af")) for state in states),
            ),
        )

    @admin.display(description="secret")
    def masked_secret(self, endpoint: WebhookEndpoint) -> str:
        """Masked: the secret is shown once, when made."""
        return mask_secret(endpoint.secret)

    @admin.display(description="previous secret")
    def masked_previous_secret(self, endpoint: WebhookEndpoint) -> str:
        """The rotated-out secret still signing, masked."""
        return mask_secret(endpoint.previous_secret)

    @admin.display(description="operations")
    def operations(self, endpoint: WebhookEndpoint) -> str:
        """Links to the rotate and test pages (each confirms first)."""
        return format_html(
            '<a class="button" href="{}">Rotate secret</a> '
            '<a class="button" href="{}">Send a test event</a> '
            '<a href="{}">All its deliveries</a>',
            reverse("admin:ultimate_jobs_webhookendpoint_rotate", args=[endpoint.pk]),
            reverse("admin:ultimate_jobs_webhookendpoint_test", args=[endpoint.pk]),
            reverse("admin:ultimate_jobs_webhookdelivery_changelist")
            + f"?endpoint__id__exact={endpoint.pk}",
        )

    @admin.display(description="latest deliveries")
    def recent_deliveries(self, endpoint: WebhookEndpoint) -> str:
        """The latest 10 deliveries, each linked to its page."""
        rows = WebhookDelivery.objects.filter(endpoint=endpoint).order_by("-id")[:10]
        if not rows:
            return "none yet"
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                '<li><a href="{}">{} {}</a>: {} ({} attempts, last status {})</li>',
                (
                    (
                        reverse(
                            "admin:ultimate_jobs_webhookdelivery_change", args=[row.pk]
                        ),
                        row.topic,
                        row.msg_id,
                        row.state,
                        row.attempts,
                        row.last_status if row.last_status is not None else "none",
                    )
                    for row in rows
                ),
            ),
        )

    # -- add, change ------------------------------------------------------------

    def save_model(
        self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool
    ) -> None:
        """Add: make the endpoint and its secret (kept for the one showing)."""
        topics = form.cleaned_data["topics"]
        if change:
            obj.topics = topics
            obj.save()
            return
        created, secret = create_endpoint(
            obj.url, topics=topics, description=obj.description
        )
        obj.pk = created.pk
        obj.secret = created.secret
        request._uj_new_secret = secret  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: WebhookEndpoint, post_url_continue: Any = None
    ) -> HttpResponse:
        """The one page that shows the new secret."""
        secret = getattr(request, "_uj_new_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        self.message_user(request, f"Endpoint {obj.pk} added.", messages.SUCCESS)
        return _secret_page(self, request, obj, secret, "New endpoint: copy its secret")

    # -- verbs -----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        """The rotate and test pages, before the default URLs."""
        wrap = self.admin_site.admin_view
        return [
            path(
                "<str:object_id>/rotate/",
                wrap(self.rotate_view),
                name="ultimate_jobs_webhookendpoint_rotate",
            ),
            path(
                "<str:object_id>/test/",
                wrap(self.test_view),
                name="ultimate_jobs_webhookendpoint_test",
            ),
            *super().get_urls(),
        ]

    def _endpoint(self, object_id: str) -> WebhookEndpoint:
        endpoint = WebhookEndpoint.objects.filter(pk=parse_object_id(object_id)).first()
        if endpoint is None:
            raise Http404("no such endpoint")
        return endpoint

    def rotate_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm, then give the endpoint a new secret and show it once."""
        require(request, "rotate_webhookendpoint")
        endpoint = self._endpoint(object_id)
        page = reverse("admin:ultimate_jobs_webhookendpoint_change", args=[endpoint.pk])
        if not is_confirmed(request):
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"Rotate the secret of {endpoint}?",
                    "summary": (
                        "A new secret signs every request from now on. The current "
                        "one keeps signing beside it for the overlap window "
                        "(WEBHOOK_SECRET_OVERLAP), so the receiver can switch "
                        "without refusing a delivery."
                    ),
                    "verb_label": "Rotate",
                    "cancel_url": page,
                },
            )
        secret = rotate_secret(endpoint)
        log_operator_action(
            request,
            WebhookEndpoint,
            [(str(endpoint.pk), str(endpoint))],
            flag=CHANGE,
            message="Secret rotated (admin)",
        )
        return _secret_page(
            self, request, endpoint, secret, "Rotated: copy the new secret"
        )

    def test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm, then enqueue a ``webhook.test`` delivery to this endpoint."""
        require(request, "test_webhookendpoint")
        endpoint = self._endpoint(object_id)
        page = reverse("admin:ultimate_jobs_webhookendpoint_change", args=[endpoint.pk])
        if not is_confirmed(request):
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"Send a test event to {endpoint}?",
                    "summary": (
                        'Enqueues one signed "webhook.test" delivery to this '
                        "endpoint, whatever its topics."
                    ),
                    "verb_label": "Send",
                    "cancel_url": page,
                },
            )
        try:
            delivery = send_test(endpoint)
        except JobsError as error:
            messages.error(request, error.render())
            return HttpResponseRedirect(page)
        log_operator_action(
            request,
            WebhookDelivery,
            [(str(delivery.pk), str(delivery))],
            flag=ADDITION,
            message=f"Test event sent to endpoint {endpoint.pk} (admin)",
        )
        link = reverse("admin:ultimate_jobs_webhookdelivery_change", args=[delivery.pk])
        messages.success(request, f"Test event queued as delivery {delivery.pk}.")
        return HttpResponseRedirect(link)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Enable and disable: ``change_webhookendpoint``."""
        return bool(request.user.has_perm("ultimate_jobs.change_webhookendpoint"))

    @admin.action(permissions=["operate"], description="Enable selected endpoints")
    def enable_selected(
        self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]
    ) -> HttpResponse | None:
        """Enable (and forget the failure streak of) each selected endpoint."""
        return self._toggle(request, queryset, "enable_selected")

    @admin.action(permissions=["operate"], description="Disable selected endpoints")
    def disable_selected(
        self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]
    ) -> HttpResponse | None:
        """Disable each selected endpoint: its deliveries stop before any socket."""
        return self._toggle(request, queryset, "disable_selected")

    def _toggle(
        self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint], action: str
    ) -> HttpResponse | None:
        if not self.has_operate_permission(request):
            raise PermissionDenied("needs the change_webhookendpoint permission")
        enable = action == "enable_selected"
        label = "Enable" if enable else "Disable"
        rows = list(queryset.order_by("id")[:1000])
        if not rows:
            # Nothing to confirm: no "0 endpoint(s)?" page, no empty log.
            messages.error(request, self.unknown("").render())
            return None
        if not is_confirmed(request):
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"{label} {counted(len(rows), 'endpoint')}?",
                    "verb_label": label,
                    "jobs": [(str(row.pk), str(row)) for row in rows],
                    "action": action,
                    "selected": [str(row.pk) for row in rows],
                },
            )
        done = [
            (str(row.pk), str(row))
            for row in rows
            if (
                enable_endpoint(row.pk)
                if enable
                else disable_endpoint(row.pk, "disabled from the admin")
            )
        ]
        past = "enabled" if enable else "disabled"
        log_operator_action(
            request,
            WebhookEndpoint,
            done,
            flag=CHANGE,
            message=f"Endpoint {past} (admin)",
        )
        messages.success(request, f"{counted(len(done), 'endpoint')} {past}.")
        return None


def _secret_page(
    model_admin: Any,
    request: HttpRequest,
    endpoint: WebhookEndpoint,
    secret: str,
    title: str,
) -> HttpResponse:
    response = TemplateResponse(
        request,
        "admin/django_ultimate_jobs/webhook_secret.html",
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": title,
            "secret": secret,
            "masked": mask_secret(secret),
            "overlap_until": endpoint.previous_secret_until,
            "endpoint_label": str(endpoint),
            "endpoint_url": reverse(
                "admin:ultimate_jobs_webhookendpoint_change", args=[endpoint.pk]
            ),
        },
    )
    # Nothing between here and the browser may keep the page.
    response["Cache-Control"] = "no-store"
    return response
