"""The sender against a real HTTP server on loopback (allowed by the test setting).

Deliveries go through ``deliver()``, the job and the real executor
(``run_jobs``), on PostgreSQL with a frozen clock that the tests move to
make retries due. The endpoint is a scripted server in this process
(tests/support/webhook_server.py); names resolve through test resolvers.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import trustme
from django.contrib.admin.models import LogEntry
from django.db import connection, transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from django_ultimate_jobs.models import Job
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.webhooks import create_endpoint, deliver, rotate_secret
from django_ultimate_jobs.webhooks.delivery import retry_after_seconds
from django_ultimate_jobs.webhooks.errors import (
    WebhookDeclarationInvalid,
    WebhookEndpointInvalid,
    WebhookEventInvalid,
)
from django_ultimate_jobs.webhooks.models import WebhookDelivery, WebhookEndpoint
from django_ultimate_jobs.webhooks.signing import new_secret
from tests.support.webhook_server import HookServer, Reply
from tests.support.webhooks import LOOPBACK
from tests.support.workers import REPO_ROOT

pytestmark = pytest.mark.postgres


def _job(delivery):
    return Job.objects.get(id=WebhookDelivery.objects.get(pk=delivery.pk).job_id)


def _row(delivery):
    return WebhookDelivery.objects.get(pk=delivery.pk)


def test_a_delivery_is_signed_and_verified_by_the_reference_library(hooks, server):
    endpoint, secret = create_endpoint(server.url(), topics=["invoice.paid"])
    (delivery,) = deliver("invoice.paid", {"invoice": 7})
    run_jobs()

    (request,) = server.received
    assert Webhook(secret).verify(request.body, request.headers) == {"invoice": 7}
    assert request.headers["webhook-id"] == delivery.msg_id
    assert request.headers["content-type"] == "application/json"
    assert request.headers["host"] == f"127.0.0.1:{server.port}"
    row = _row(delivery)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 1, 200)
    (attempt,) = row.attempt_log
    assert attempt["status"] == 200 and attempt["error"] == ""
    assert attempt["duration_ms"] >= 0
    assert _job(delivery).state == "done"
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).last_success_at is not None


def test_the_attempt_log_keeps_the_latest_50_attempts(hooks, server):
    create_endpoint(server.url(), topics=["*"])
    (delivery,) = deliver("t", "{}")
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        attempt_log=[{"attempt": n} for n in range(1, 51)], attempts=50
    )
    run_jobs()
    row = _row(delivery)
    assert [e["attempt"] for e in row.attempt_log] == list(range(2, 52))
    assert (row.attempts, row.attempt_log[-1]["status"]) == (51, 200)


def test_fan_out_goes_to_each_subscribed_enabled_endpoint_once(hooks, server):
    create_endpoint(server.url("/a"), topics=["order.created"])
    create_endpoint(server.url("/b"), topics=["*"])
    create_endpoint(server.url("/c"), topics=["order.cancelled"])
    disabled, _ = create_endpoint(server.url("/d"), topics=["order.created"])
    WebhookEndpoint.objects.filter(pk=disabled.pk).update(
        disabled_at="2030-01-01T00:00Z"
    )

    written = deliver("order.created", "{}", id="evt_1")
    again = deliver("order.created", "{}", id="evt_1")  # the same event: no resend
    run_jobs()
    assert len(written) == 2 and again == []
    assert sorted(r.path for r in server.received) == ["/a", "/b"]
    assert {r.headers["webhook-id"] for r in server.received} == {"evt_1"}


def test_deliver_commits_and_rolls_back_with_the_caller(hooks, server):
    create_endpoint(server.url(), topics=["*"])
    with pytest.raises(RuntimeError), transaction.atomic():
        deliver("t", "{}")
        raise RuntimeError("the business write failed")
    assert not WebhookDelivery.objects.exists()
    assert not Job.objects.filter(name="ultimate_jobs.webhook").exists()
    run_jobs()
    assert server.received == []


def test_500_then_success_retries_on_the_backoff(hooks, server, clock):
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    server.script(Reply(500))
    (delivery,) = deliver("t", "{}")
    run_jobs()
    assert _row(delivery).state == "pending"
    assert _job(delivery).run_at > clock.now()  # a retry, due later
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).consecutive_failures == 1

    clock.advance(timedelta(minutes=5))
    run_jobs()
    row = _row(delivery)
    assert [a["status"] for a in row.attempt_log] == [500, 200]
    assert row.attempt_log[0]["error"].startswith("X_WEBHOOK_DELIVERY_FAILED")
    assert (row.state, _job(delivery).state, _job(delivery).attempt) == (
        "delivered",
        "done",
        2,
    )
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).consecutive_failures == 0
    # The same id on both attempts; each signed at its own send time.
    assert len({r.headers["webhook-id"] for r in server.received}) == 1


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(hooks, server, clock, status):
    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(status, {"Retry-After": "7"}))
    (delivery,) = deliver("t", "{}")
    run_jobs()
    job = _job(delivery)
    assert job.state in ("ready", "delayed")
    assert job.run_at == clock.now() + timedelta(seconds=7)
    assert _row(delivery).last_error.startswith("X_WEBHOOK_DELIVERY_THROTTLED")

    clock.advance(timedelta(seconds=6))
    run_jobs()
    assert len(server.received) == 1
    clock.advance(timedelta(seconds=1))
    run_jobs()
    assert (_row(delivery).state, len(server.received)) == ("delivered", 2)


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("120") == 120
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470) == 10
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490) == 0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


@pytest.mark.parametrize("status", [400, 404, 410])
def test_other_4xx_are_terminal(hooks, server, status):
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    server.script(Reply(status))
    (delivery,) = deliver("t", "{}")
    run_jobs()
    row = _row(delivery)
    assert (row.state, row.attempts, row.last_status) == ("failed", 1, status)
    assert row.last_error.startswith("X_WEBHOOK_DELIVERY_REJECTED")
    assert _job(delivery).state == "dead"
    row = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert row.consecutive_failures == 1
    # 410 Gone disables the endpoint at once; another 4xx does not.
    assert (row.disabled_at is not None) is (status == 410)
    if status == 410:
        assert row.disabled_reason == "the endpoint answered 410 Gone"
        (entry,) = LogEntry.objects.filter(object_id=str(endpoint.pk))
        assert entry.change_message == "The endpoint answered 410 Gone (webhook sender)"
        assert deliver("t", "{}") == []


def test_a_redirect_is_never_followed(hooks, server):
    with HookServer() as elsewhere:
        create_endpoint(server.url(), topics=["*"])
        server.script(Reply(307, {"Location": elsewhere.url("/stolen")}))
        (delivery,) = deliver("t", '{"card": "4242"}')
        run_jobs()
        assert elsewhere.received == []
    row = _row(delivery)
    assert (row.state, row.last_status) == ("failed", 307)
    assert "redirect" in row.last_error
    assert _job(delivery).state == "dead"


def test_a_slow_endpoint_hits_the_timeout(hooks, server, declare_webhook):
    slow = declare_webhook("slow", timeout="500ms")
    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(200, delay_s=10))
    started = time.monotonic()
    (delivery,) = slow.deliver("t", "{}")
    run_jobs()
    assert time.monotonic() - started < 5
    row = _row(delivery)
    assert (row.state, row.last_status) == ("pending", None)
    assert "timeout" in row.last_error and row.last_error.startswith(
        "X_WEBHOOK_DELIVERY_FAILED"
    )
    assert 400 <= row.attempt_log[0]["duration_ms"] < 3000


def test_a_response_dripping_one_byte_at_a_time_is_cut_at_the_total_timeout(
    hooks, declare_webhook
):
    """Each byte resets a per-read timeout; the whole-request ceiling still holds."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def drip():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                if stop.wait(0.1):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    dripping = declare_webhook("drip", timeout="1s")
    create_endpoint(f"http://127.0.0.1:{port}/hook", topics=["*"])
    started = time.monotonic()
    (delivery,) = dripping.deliver("t", "{}")
    try:
        run_jobs()
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - started < 4
    assert "timeout" in _row(delivery).last_error


def test_ten_consecutive_failures_disable_the_endpoint_with_an_admin_log(hooks, server):
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    server.script(*[Reply(500)] * 20)
    deliveries = [deliver("t", f'{{"n": {n}}}')[0] for n in range(12)]
    run_jobs()

    row = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert row.disabled_at is not None
    assert row.consecutive_failures == 10
    assert "10 consecutive" in row.disabled_reason
    assert len(server.received) == 10  # the last two never reached a socket
    states = [_row(d).state for d in deliveries]
    assert states.count("failed") == 3  # the 10th, and the two refused after
    refused = [
        _row(d) for d in deliveries if _row(d).attempts and _row(d).last_status is None
    ]
    assert all(r.last_error.startswith("X_WEBHOOK_ENDPOINT_DISABLED") for r in refused)
    (entry,) = LogEntry.objects.filter(object_id=str(endpoint.pk))
    assert "10 consecutive" in entry.change_message
    assert entry.user.username == "ultimate-jobs" and not entry.user.is_active
    assert entry.get_admin_url().endswith(f"/webhookendpoint/{endpoint.pk}/change/")


def test_a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends(
    hooks, server
):
    endpoint, old = create_endpoint(server.url(), topics=["*"])
    new = rotate_secret(endpoint, overlap="1h")
    deliver("t", "{}")
    run_jobs()
    request = server.received[-1]
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(request.body, request.headers)

    rotate_secret(endpoint, overlap=0)
    newest = WebhookEndpoint.objects.get(pk=endpoint.pk).secret
    deliver("t", "{}")
    run_jobs()
    request = server.received[-1]
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    Webhook(newest).verify(request.body, request.headers)


# -- pinning and TLS -------------------------------------------------------------


def test_the_connection_goes_to_the_vetted_address_without_a_second_lookup(
    hooks, server, declare_webhook
):
    """DNS rebinding: the resolver answers loopback once, then a private
    address; the request goes to the vetted answer and the name is looked up
    once per attempt."""
    calls = []

    def rebinding(host, port):
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["10.9.9.9"]

    pinned = declare_webhook("pinned", resolve=rebinding)
    create_endpoint(f"http://hooks.example.test:{server.port}/in", topics=["*"])
    (delivery,) = pinned.deliver("t", "{}")
    run_jobs()
    assert calls == ["hooks.example.test"]
    (request,) = server.received
    assert request.headers["host"] == f"hooks.example.test:{server.port}"
    assert _row(delivery).state == "delivered"


@pytest.fixture
def tls_server():
    authority = trustme.CA()
    with HookServer() as running:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        authority.issue_cert("hooks.example.test").configure_cert(context)
        running._server.socket = context.wrap_socket(
            running._server.socket, server_side=True
        )
        client = ssl.create_default_context()
        authority.configure_trust(client)
        yield running, client


def test_tls_checks_the_hostname_while_connecting_to_the_pinned_address(
    hooks, tls_server, declare_webhook
):
    server, trust = tls_server
    resolve = {"hooks.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]}
    secure = declare_webhook(
        "tls", resolve=lambda host, port: resolve[host], ssl_context=trust
    )
    create_endpoint(f"https://hooks.example.test:{server.port}/in", topics=["ok"])
    create_endpoint(f"https://other.example.test:{server.port}/in", topics=["wrong"])

    (good,) = secure.deliver("ok", "{}")
    (bad,) = secure.deliver("wrong", "{}")
    run_jobs()
    assert _row(good).state == "delivered"
    assert server.received[0].headers["host"] == f"hooks.example.test:{server.port}"
    # The certificate names hooks.example.test, not other.example.test.
    assert _row(bad).last_status is None and "TLS" in _row(bad).last_error
    assert len(server.received) == 1


# -- refusals before any socket ------------------------------------------------------


class NoSocketClient:
    """Stands in for the client to prove it is never reached."""

    def __init__(self):
        self.calls = []

    def post(self, *args, **kwargs):
        self.calls.append(args)
        raise AssertionError("a refused address reached the client")


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:192.168.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://metadata.example.test/",
        "http://mapped.example.test/",
        "http://nat64.example.test/",
    ],
)
def test_refused_addresses_never_reach_a_socket(hooks, declare_webhook, url):
    names = {
        "metadata.example.test": ["169.254.169.254"],
        "mapped.example.test": ["::ffff:10.0.0.1"],
        "nat64.example.test": ["64:ff9b::7f00:1"],
    }
    guarded = declare_webhook("guarded", resolve=lambda host, port: names[host])
    guarded.sender._client = NoSocketClient()
    if "example.test" in url:
        create_endpoint(url, topics=["*"])  # a name is judged at each send
    else:
        # An address in the URL is refused when the endpoint is made; one
        # saved before the allow-list narrowed is still refused at the send.
        with pytest.raises(WebhookEndpointInvalid) as caught:
            create_endpoint(url, topics=["*"])
        assert caught.value.meta["address_class"]
        assert not WebhookEndpoint.objects.exists()
        WebhookEndpoint.objects.create(url=url, topics=["*"], secret=new_secret())
    (delivery,) = guarded.deliver("t", "{}")
    run_jobs()
    assert guarded.sender._client.calls == []
    row = _row(delivery)
    assert row.state == "failed" and row.last_status is None
    assert row.last_error.startswith("X_WEBHOOK_ENDPOINT_INVALID")
    assert _job(delivery).state == "dead"


def test_plain_http_is_refused_outside_debug_without_the_setting(settings, pg_driver):
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"]}
    from django_ultimate_jobs.webhooks.errors import WebhookEndpointInvalid

    with pytest.raises(WebhookEndpointInvalid):
        create_endpoint("http://example.com/hook")
    settings.DEBUG = True
    endpoint, _ = create_endpoint("http://example.com/hook")
    assert endpoint.pk


_WITHOUT_URLLIB3 = """
import sys
sys.modules["urllib3"] = None  # as if the webhooks extra were not installed
import django
django.setup()
from django_ultimate_jobs.webhooks import deliver, sign, webhook_receiver
from django_ultimate_jobs.webhooks.transport import PinnedClient
try:
    PinnedClient(connect_timeout_s=1, timeout_s=1)
except Exception as error:
    print(error.code, "|", error.fix)
"""


def test_without_the_extra_the_package_imports_and_the_sender_names_it():
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_URLLIB3],
        cwd=REPO_ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        'X_WEBHOOK_CLIENT_MISSING | pip install "django-ultimate-jobs[webhooks]" '
        "on every worker"
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"X A": "v"},
        {"webhook-id:msg_forged": "y"},
        {"": "v"},
        {"X-Ok\x00": "v"},
        {"X-Caf\u00e9": "v"},
        {"Webhook-Signature": "v1,forged"},
        {"X-Ok": "a\r\nwebhook-id: forged"},
        {"X-Ok": "a\x00b"},
        {"X-Ok": "a\x7fb"},
        {"X-Ok": " padded"},
        {"X-Ok": "caf\u00e9"},
    ],
)
def test_endpoint_headers_that_are_not_valid_http_fields_are_refused(
    settings, pg_driver, headers
):
    from django_ultimate_jobs.models import WebhookEndpoint
    from django_ultimate_jobs.webhooks.errors import WebhookEndpointInvalid

    settings.ULTIMATE_JOBS = {"QUEUES": ["default"]}
    with pytest.raises(WebhookEndpointInvalid) as caught:
        create_endpoint("https://example.com/hook", headers=headers)
    assert caught.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
    assert not WebhookEndpoint.objects.exists()
    endpoint, _ = create_endpoint(
        "https://example.com/hook", headers={"X-Tenant_ID.v2": "a b\tc"}
    )
    assert endpoint.headers == {"X-Tenant_ID.v2": "a b\tc"}


def test_the_request_on_the_wire_is_the_senders_headers_in_order_then_the_body(
    hooks, server
):
    create_endpoint(server.url(), topics=["*"], headers={"X-Tenant": "acme"})
    deliver("t", '{"a": 1}')
    run_jobs()
    (request,) = server.received
    assert list(request.headers) == [
        "accept-encoding",
        "x-tenant",
        "content-type",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "host",
        "user-agent",
        "content-length",
    ]
    assert request.headers["accept-encoding"] == "identity"
    assert request.headers["x-tenant"] == "acme"
    assert request.headers["user-agent"] == "django-ultimate-jobs-webhooks"
    assert request.headers["content-length"] == "8"
    assert request.body == b'{"a": 1}'


def test_an_answer_that_closes_its_connection_is_not_kept(hooks, server):
    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(200, headers={"Connection": "close"}), Reply(200))
    first = deliver("t", "{}")
    run_jobs()
    second = deliver("t", "{}")
    run_jobs()
    assert [_row(d).state for d in first + second] == ["delivered", "delivered"]
    assert len(server.received) == 2


def _prepared(table):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{table}%"],
        )
        return [statement for (statement,) in cursor.fetchall()]


@pytest.mark.parametrize("prepare", [True, False])
def test_the_senders_statements_are_prepared_unless_prepare_is_off(
    hooks, server, settings, prepare
):
    settings.ULTIMATE_JOBS = {**LOOPBACK, "PREPARE": prepare}
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # psycopg forgets its own too
    create_endpoint(server.url(), topics=["*"])
    server.script(Reply(500), Reply(200))
    (delivery,) = deliver("t", "{}")
    run_jobs()
    Job.objects.filter(id=_row(delivery).job_id).update(run_at=timezone.now())
    run_jobs()
    row = _row(delivery)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 2, 200)
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.consecutive_failures == 0 and endpoint.last_success_at
    statements = _prepared("ultimate_jobs_webhook_")
    if prepare:
        # The read, and the record of a failure and of a success (each with
        # the endpoint's streak, in one statement).
        assert len(statements) == 3, statements
        assert sum("consecutive_failures + 1" in s for s in statements) == 1
    else:
        assert statements == []


# -- bad input, refused with a code before anything is written ----------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/",
        "https://[::1]/",
        "https://2130706433/",
        "https://10.0.0.1/",
    ],
)
def test_an_address_in_the_url_is_judged_when_the_endpoint_is_made(
    settings, pg_driver, declare_webhook, url
):
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"]}
    with pytest.raises(WebhookEndpointInvalid) as caught:
        create_endpoint(url, topics=["*"])
    assert caught.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
    assert "non-public address" in caught.value.cause
    assert not WebhookEndpoint.objects.exists()
    # A network a declaration may reach is allowed for its endpoints.
    declare_webhook("internal", allow_networks=["127.0.0.0/8", "::1/128", "10.0.0.0/8"])
    endpoint, _ = create_endpoint(url, topics=["*"])
    assert endpoint.pk


def test_allow_networks_takes_strings_as_the_setting_does(
    hooks, server, declare_webhook, settings
):
    settings.ULTIMATE_JOBS = {**LOOPBACK, "WEBHOOK_ALLOW_NETWORKS": []}
    with pytest.raises(WebhookEndpointInvalid):
        create_endpoint(server.url(), topics=["*"])
    internal = declare_webhook("internal.strings", allow_networks=["127.0.0.0/8"])
    create_endpoint(server.url(), topics=["*"])
    (delivery,) = internal.deliver("t", "{}")
    run_jobs()
    assert _row(delivery).state == "delivered"


@pytest.mark.parametrize(
    "networks", ["127.0.0.0/8", ["10.0.0.1/8"], ["not a network"], [42], {"a": 1}]
)
def test_bad_allow_networks_are_refused_when_declared(
    pg_driver, declare_webhook, networks
):
    with pytest.raises(WebhookDeclarationInvalid) as caught:
        declare_webhook("bad.networks", allow_networks=networks)
    assert caught.value.code == "X_WEBHOOK_DECLARATION_INVALID"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"topics": []}, "topics is empty"),
        ({"topics": ["invoice.*"]}, 'holds a "*"'),
        ({"topics": 5}, "topics is a list"),
        ({"headers": [("X-A", "1")]}, "headers are a dict"),
    ],
)
def test_bad_topics_and_headers_are_refused_with_their_own_fix(
    settings, pg_driver, arguments, expected
):
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"]}
    with pytest.raises(WebhookEndpointInvalid) as caught:
        create_endpoint("https://example.com/hook", **{"topics": ["a"], **arguments})
    assert expected in caught.value.cause
    assert "topics" in caught.value.fix and "https://" not in caught.value.fix
    assert not WebhookEndpoint.objects.exists()


def test_rotating_something_that_is_not_a_saved_endpoint_is_refused(hooks, server):
    for given in (None, 99999, WebhookEndpoint(url=server.url(), topics=["*"])):
        with pytest.raises(WebhookEndpointInvalid):
            rotate_secret(given)
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    WebhookEndpoint.objects.filter(pk=endpoint.pk).delete()
    with pytest.raises(WebhookEndpointInvalid) as caught:
        rotate_secret(endpoint)
    assert "no longer exists" in caught.value.cause


def test_deliver_refuses_bad_endpoints_and_bodies_nested_too_deep(hooks, server):
    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    for arguments in ({"endpoints": ["x"]}, {"endpoints": 5}, {"endpoints": "1"}):
        with pytest.raises(WebhookEventInvalid):
            deliver("t", "{}", **arguments)
    with pytest.raises(WebhookEventInvalid):
        deliver("t", deep)
    assert not WebhookDelivery.objects.exists()
    assert deliver("t", "{}", endpoints=[99999]) == []
    assert len(deliver("t", "{}", endpoints=[endpoint])) == 1
