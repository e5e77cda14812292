"""The webhook admin pages: secrets shown once, verbs gated, logged, no 500s."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_ultimate_jobs.models import Job, WebhookDelivery, WebhookEndpoint
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.webhooks import create_endpoint, deliver
from tests.support.webhook_server import Reply

pytestmark = pytest.mark.postgres

ENDPOINTS = "admin:ultimate_jobs_webhookendpoint_changelist"
DELIVERIES = "admin:ultimate_jobs_webhookdelivery_changelist"


def _endpoint_page(endpoint):
    return reverse("admin:ultimate_jobs_webhookendpoint_change", args=[endpoint.pk])


@pytest.fixture
def viewer(db):
    """Staff who may look at webhooks but hold no verb's permission."""
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    for codename in ("view_webhookendpoint", "view_webhookdelivery"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def test_adding_an_endpoint_shows_its_secret_once(admin_client, hooks, server):
    response = admin_client.post(
        reverse("admin:ultimate_jobs_webhookendpoint_add"),
        {"url": server.url(), "description": "billing", "topics_text": "a.b, c.d"},
    )
    assert response.status_code == 200, response.content[:500]
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.topics == ["a.b", "c.d"]
    assert endpoint.secret.startswith("whsec_")
    assert endpoint.secret in response.text
    assert "no-store" in response["Cache-Control"]
    assert LogEntry.objects.get(object_id=str(endpoint.pk)).action_flag == ADDITION

    # Never again, anywhere.
    deliver("a.b", "{}")
    run_jobs()
    delivery = WebhookDelivery.objects.get()
    for url in (
        reverse(ENDPOINTS),
        _endpoint_page(endpoint),
        reverse("admin:ultimate_jobs_webhookendpoint_history", args=[endpoint.pk]),
        reverse(DELIVERIES),
        reverse("admin:ultimate_jobs_webhookdelivery_change", args=[delivery.pk]),
    ):
        page = admin_client.get(url)
        assert page.status_code == 200, url
        assert endpoint.secret not in page.text, url
        assert endpoint.secret[6:20] not in page.text, url
    assert "whsec_…" in admin_client.get(_endpoint_page(endpoint)).text


def test_a_bad_url_is_refused_with_its_code(admin_client, hooks):
    response = admin_client.post(
        reverse("admin:ultimate_jobs_webhookendpoint_add"),
        {"url": "ftp://example.com/", "topics_text": "*"},
    )
    assert response.status_code == 200
    assert "X_WEBHOOK_ENDPOINT_INVALID" in response.text
    assert not WebhookEndpoint.objects.exists()


def test_the_list_shows_health_at_a_glance(admin_client, hooks, server, clock):
    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(500), Reply(400))
    for n in range(3):
        deliver("t", f'{{"n": {n}}}')
    run_jobs()
    page = admin_client.get(reverse(ENDPOINTS)).text
    assert page.count('title="delivered"') == 1
    assert page.count('title="failed"') == 1  # the 400
    assert page.count('title="pending"') == 1  # the 500, retried later
    assert server.url() in page  # origin and path


def test_rotating_confirms_shows_the_new_secret_once_and_logs(
    admin_client, hooks, server
):
    endpoint, old = create_endpoint(server.url(), topics=["*"])
    url = reverse("admin:ultimate_jobs_webhookendpoint_rotate", args=[endpoint.pk])
    assert "Yes, rotate" in admin_client.get(url).text
    assert WebhookEndpoint.objects.get().secret == old

    response = admin_client.post(url, {"confirmed": "yes"})
    row = WebhookEndpoint.objects.get()
    assert row.secret != old and row.previous_secret == old
    assert row.secret in response.text and old not in response.text
    assert "no-store" in response["Cache-Control"]
    entry = LogEntry.objects.get(change_message="Secret rotated (admin)")
    assert (entry.object_id, entry.action_flag) == (str(endpoint.pk), CHANGE)
    assert admin_client.get(entry.get_admin_url()).status_code == 200
    assert old not in entry.change_message and row.secret not in entry.change_message


def test_sending_a_test_event_confirms_enqueues_and_logs(admin_client, hooks, server):
    endpoint, _ = create_endpoint(server.url(), topics=["orders"])
    url = reverse("admin:ultimate_jobs_webhookendpoint_test", args=[endpoint.pk])
    assert "Yes, send" in admin_client.get(url).text
    assert not WebhookDelivery.objects.exists()

    response = admin_client.post(url, {"confirmed": "yes"})
    delivery = WebhookDelivery.objects.get()
    assert delivery.topic == "webhook.test"
    assert response.url.endswith(f"/webhookdelivery/{delivery.pk}/change/")
    entry = LogEntry.objects.get(object_id=str(delivery.pk))
    assert admin_client.get(entry.get_admin_url()).status_code == 200
    run_jobs()
    assert WebhookDelivery.objects.get().state == "delivered"
    assert len(server.received) == 1


def test_the_delivery_page_lists_attempts_and_escapes_the_body(
    admin_client, hooks, server, clock
):
    from datetime import timedelta

    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(503))
    (delivery,) = deliver("t", '{"note": "<script>alert(1)</script>"}')
    run_jobs()
    clock.advance(timedelta(minutes=10))
    run_jobs()
    page = admin_client.get(
        reverse("admin:ultimate_jobs_webhookdelivery_change", args=[delivery.pk])
    ).text
    assert "<td>503</td>" in page and "<td>200</td>" in page
    assert "X_WEBHOOK_DELIVERY_FAILED" in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_replay_is_gated_confirmed_and_logged(
    admin_client, viewer_client, hooks, server
):
    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(404))
    (delivery,) = deliver("t", "{}")
    run_jobs()
    assert WebhookDelivery.objects.get().state == "failed"
    chosen = {"action": "replay_selected", "_selected_action": [str(delivery.pk)]}

    assert "replay_selected" not in viewer_client.get(reverse(DELIVERIES)).text
    # Django's action filter drops the action: the list comes back, unchanged.
    viewer_client.post(reverse(DELIVERIES), {**chosen, "confirmed": "yes"})
    assert WebhookDelivery.objects.get().replays == 0

    assert "Yes, replay" in admin_client.post(reverse(DELIVERIES), chosen).text
    admin_client.post(reverse(DELIVERIES), {**chosen, "confirmed": "yes"})
    row = WebhookDelivery.objects.get()
    assert (row.replays, row.state) == (1, "pending")
    assert Job.objects.filter(id=row.job_id, state="ready").exists()
    entry = LogEntry.objects.get(change_message="Replayed (admin)")
    assert admin_client.get(entry.get_admin_url()).status_code == 200
    run_jobs()
    row = WebhookDelivery.objects.get()
    assert row.state == "delivered"
    assert [r.headers["webhook-id"] for r in server.received] == [row.msg_id] * 2


def test_verbs_need_their_own_permissions(viewer_client, hooks, server):
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    for name in ("rotate", "test"):
        url = reverse(f"admin:ultimate_jobs_webhookendpoint_{name}", args=[endpoint.pk])
        assert viewer_client.get(url).status_code == 403
        assert viewer_client.post(url, {"confirmed": "yes"}).status_code == 403
    chosen = {"action": "disable_selected", "_selected_action": [str(endpoint.pk)]}
    viewer_client.post(reverse(ENDPOINTS), {**chosen, "confirmed": "yes"})
    assert WebhookEndpoint.objects.get().disabled_at is None
    assert not LogEntry.objects.exists()


def test_disable_and_enable_confirm_and_log(admin_client, hooks, server):
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    chosen = {"action": "disable_selected", "_selected_action": [str(endpoint.pk)]}
    assert "Yes, disable" in admin_client.post(reverse(ENDPOINTS), chosen).text
    admin_client.post(reverse(ENDPOINTS), {**chosen, "confirmed": "yes"})
    assert WebhookEndpoint.objects.get().disabled_at is not None
    assert deliver("t", "{}") == []  # a disabled endpoint gets nothing

    chosen["action"] = "enable_selected"
    admin_client.post(reverse(ENDPOINTS), {**chosen, "confirmed": "yes"})
    assert WebhookEndpoint.objects.get().disabled_at is None
    assert [e.change_message for e in LogEntry.objects.order_by("id")] == [
        "Endpoint disabled (admin)",
        "Endpoint enabled (admin)",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/admin/ultimate_jobs/webhookendpoint/abc/change/",
        "/admin/ultimate_jobs/webhookendpoint/%00/change/",
        "/admin/ultimate_jobs/webhookendpoint/9999999999999999999999/change/",
        "/admin/ultimate_jobs/webhookendpoint/%00/rotate/",
        "/admin/ultimate_jobs/webhookendpoint/12x/test/",
        "/admin/ultimate_jobs/webhookendpoint/404/rotate/",
        "/admin/ultimate_jobs/webhookdelivery/%00/change/",
        "/admin/ultimate_jobs/inbounddelivery/x/change/",
    ],
)
def test_bad_ids_are_404_never_500(admin_client, hooks, path):
    assert admin_client.get(path).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        "?enabled=maybe",
        "?enabled=%00",
    ],
)
def test_bad_endpoint_filters_redirect(admin_client, hooks, query):
    response = admin_client.get(reverse(ENDPOINTS) + query)
    assert response.status_code == 302 and response.url.endswith("?e=1")


@pytest.mark.parametrize(
    "query",
    ["?state=%00", "?state=nope", "?endpoint__id__exact=x", "?endpoint__id__exact=%00"],
)
def test_bad_delivery_filters_redirect(admin_client, hooks, query):
    response = admin_client.get(reverse(DELIVERIES) + query)
    assert response.status_code == 302 and response.url.endswith("?e=1")


def test_other_lookups_are_refused(admin_client, hooks):
    for name in (DELIVERIES, ENDPOINTS):
        assert admin_client.get(reverse(name) + "?body__regex=x").status_code == 400
