"""The inbound receiver: verify, dedupe, hand over; 2xx only after commit.

Requests are WSGI requests built here (so the tests own ``wsgi.input`` and
count the bytes the view reads) and handed to the pattern's view, as
Django's handler would.
"""

from __future__ import annotations

import base64
import hmac
import io
import logging
import time
from datetime import UTC, datetime

import psycopg
import pytest
from django.core.handlers.wsgi import WSGIRequest
from django.db import connection
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from django_ultimate_jobs.models import InboundDelivery, Job
from django_ultimate_jobs.webhooks import StandardWebhooks, sign, webhook_receiver
from django_ultimate_jobs.webhooks.errors import WebhookReceiverInvalid
from tests.support.workers import database_url

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
OLD_SECRET = "whsec_" + base64.b64encode(bytes(range(1, 33))).decode()
NOW = 1_800_000_000
BODY = b'{"type": "payment.succeeded", "id": 7}'


class CountingStream(io.BytesIO):
    """A ``wsgi.input`` that counts the bytes the application read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk


def _request(
    body: bytes,
    headers: dict[str, str],
    *,
    method: str = "POST",
    length: bool = True,
    chunked: bool = False,
    terminated: bool = True,
) -> tuple[WSGIRequest, CountingStream]:
    stream = CountingStream(body)
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/hooks/in/",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": stream,
        "wsgi.url_scheme": "http",
        "CONTENT_TYPE": "application/json",
    }
    if length:
        environ["CONTENT_LENGTH"] = str(len(body))
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        environ["wsgi.input_terminated"] = terminated
    for name, value in headers.items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    return WSGIRequest(environ), stream


def _signed(msg_id="msg_1", stamp=NOW, body=BODY, secret=SECRET) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(secret, msg_id, stamp, body),
    }


class Calls:
    def __init__(self, fail: bool = False):
        self.events = []
        self.fail = fail

    def __call__(self, event):
        self.events.append(event)
        if self.fail:
            raise RuntimeError("the handler broke")


def _view(handle, *, secrets=(SECRET,), max_bytes=1024, now=NOW, name="hooks"):
    pattern = webhook_receiver(
        name=name,
        path="hooks/in/",
        verify=StandardWebhooks(list(secrets), now=lambda: now),
        handle=handle,
        max_bytes=max_bytes,
    )
    return pattern.callback


def _post(view, body=BODY, headers=None, **kwargs):
    request, stream = _request(
        body, _signed() if headers is None else headers, **kwargs
    )
    return view(request), stream


def test_a_verified_delivery_runs_handle_once_and_replays_are_acknowledged(db):
    calls = Calls()
    view = _view(calls)
    first, _ = _post(view)
    assert (first.status_code, first.content) == (200, b'{"status": "accepted"}')
    again, _ = _post(view)
    assert (again.status_code, again.content) == (200, b'{"status": "duplicate"}')
    (event,) = calls.events
    assert (event.id, event.timestamp, event.json()["id"]) == ("msg_1", NOW, 7)
    row = InboundDelivery.objects.get()
    assert (row.receiver, row.webhook_id, row.size) == ("hooks", "msg_1", len(BODY))
    assert row.signed_at == datetime.fromtimestamp(NOW, UTC)


def test_a_job_handle_is_enqueued_once_per_delivery_id(db, pg_driver, declare_jobs):
    @declare_jobs("default", "tests.inbound")()
    def on_payment(ctx, *, webhook_id: str, body: str):
        return None

    view = _view(on_payment)
    for _ in range(3):
        assert _post(view)[0].status_code == 200
    (job,) = Job.objects.filter(name="tests.inbound.on_payment")
    assert job.input == {"webhook_id": "msg_1", "body": BODY.decode()}
    assert InboundDelivery.objects.get().job_id == job.id


def test_the_same_id_at_two_receivers_is_two_deliveries(db):
    calls = Calls()
    assert _post(_view(calls, name="provider_a"))[0].status_code == 200
    assert _post(_view(calls, name="provider_b"))[0].status_code == 200
    assert len(calls.events) == 2


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(
            lambda h: {
                **h,
                "webhook-signature": "v1,"
                + base64.b64encode(
                    bytes([base64.b64decode(h["webhook-signature"][3:])[0] ^ 1])
                    + base64.b64decode(h["webhook-signature"][3:])[1:]
                ).decode(),
            },
            id="one-bit-flipped",
        ),
        pytest.param(lambda h: _signed(secret=OLD_SECRET), id="wrong-secret"),
        pytest.param(lambda h: {**h, "webhook-id": "msg_2"}, id="other-id"),
        pytest.param(
            lambda h: {**h, "webhook-timestamp": str(NOW + 1)}, id="other-timestamp"
        ),
    ],
)
def test_forgeries_are_401_and_run_nothing(db, forge):
    calls = Calls()
    response, _ = _post(_view(calls), headers=forge(_signed()))
    assert response.status_code == 401
    assert response.content == b'{"error": "X_WEBHOOK_SIGNATURE_INVALID"}'
    assert calls.events == [] and not InboundDelivery.objects.exists()


@pytest.mark.parametrize(
    ("offset", "status"),
    [(-300, 200), (-301, 401), (300, 200), (301, 401)],
)
def test_stale_and_future_timestamps_at_the_tolerance(db, offset, status):
    stamp = NOW + offset
    response, _ = _post(_view(Calls()), headers=_signed(stamp=stamp))
    assert response.status_code == status
    if status == 401:
        assert b"X_WEBHOOK_SIGNATURE_STALE" in response.content


def test_several_secrets_verify_during_a_rotation(db):
    view = _view(Calls(), secrets=(SECRET, OLD_SECRET))
    assert _post(view, headers=_signed("msg_new"))[0].status_code == 200
    assert (
        _post(view, headers=_signed("msg_old", secret=OLD_SECRET))[0].status_code == 200
    )


def test_what_the_reference_library_signs_is_accepted(db):
    now = int(time.time())
    when = datetime.fromtimestamp(now, UTC)
    signature = Webhook(SECRET).sign("msg_ref", when, BODY.decode())
    headers = {
        "webhook-id": "msg_ref",
        "webhook-timestamp": str(now),
        "webhook-signature": signature,
    }
    view = _view(Calls(), now=now)
    assert _post(view, headers=headers)[0].status_code == 200


@pytest.mark.parametrize(
    "msg_id",
    [
        pytest.param("x" * 201, id="over-200"),
        pytest.param("msg 1", id="space"),
        pytest.param("msg\t1", id="tab"),
    ],
)
def test_a_signed_request_with_an_unusable_id_is_a_coded_400(db, msg_id):
    """However well signed, an id the receiver cannot keep is named as such
    (not as a bad signature), and nothing runs."""
    calls = Calls()
    response, _ = _post(_view(calls), headers=_signed(msg_id=msg_id))
    assert (response.status_code, response.content) == (
        400,
        b'{"error": "X_WEBHOOK_EVENT_INVALID"}',
    )
    assert calls.events == [] and not InboundDelivery.objects.exists()


def test_an_id_of_200_printable_characters_is_accepted(db):
    msg_id = "~" + "x" * 199
    calls = Calls()
    response, _ = _post(_view(calls), headers=_signed(msg_id=msg_id))
    assert response.status_code == 200 and calls.events[0].id == msg_id


def test_a_zero_padded_timestamp_is_accepted_as_the_reference_library_accepts_it(db):
    """The reference library reads "000<now>" as the number and signs the
    number; so does the receiver. A signature over the padded text is refused
    by both; so is a timestamp of more than 15 digits."""
    now = int(time.time())
    padded = f"000{now}"
    signature = Webhook(SECRET).sign("msg_pad", datetime.fromtimestamp(now, UTC), BODY)
    headers = {
        "webhook-id": "msg_pad",
        "webhook-timestamp": padded,
        "webhook-signature": signature,
    }
    Webhook(SECRET).verify(BODY, headers)  # the reference library accepts it
    calls = Calls()
    response, _ = _post(_view(calls, now=now), headers=headers)
    assert response.status_code == 200 and calls.events[0].timestamp == now

    over = {**headers, "webhook-timestamp": "0" * (16 - len(str(now))) + str(now)}
    assert _post(_view(calls, now=now), headers=over)[0].status_code == 401
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    text_signed = {
        **headers,
        "webhook-id": "msg_pad_text",
        "webhook-signature": "v1,"
        + base64.b64encode(
            hmac.new(key, f"msg_pad_text.{padded}.".encode() + BODY, "sha256").digest()
        ).decode(),
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(BODY, text_signed)
    response, _ = _post(_view(calls, now=now), headers=text_signed)
    assert response.content == b'{"error": "X_WEBHOOK_SIGNATURE_INVALID"}'


def test_svix_header_names_are_read_when_no_webhook_header_is_sent(db):
    calls = Calls()
    svix = {
        name.replace("webhook-", "svix-"): value for name, value in _signed().items()
    }
    response, _ = _post(_view(calls), headers=svix)
    assert response.status_code == 200 and calls.events[0].id == "msg_1"
    # One set or the other, never a mix: a partial webhook- set is missing a header.
    mixed = {"webhook-id": "msg_2", **{k: v for k, v in svix.items() if k != "svix-id"}}
    response, _ = _post(_view(calls), headers=mixed)
    assert (response.status_code, response.content) == (
        400,
        b'{"error": "X_WEBHOOK_SIGNATURE_MISSING"}',
    )
    assert len(calls.events) == 1


@pytest.mark.parametrize(
    "answered",
    [
        pytest.param([SECRET, "whsec_bm90LWEta2V5"], id="one-malformed"),
        pytest.param([], id="none"),
    ],
)
def test_a_secrets_callable_answering_a_bad_secret_is_a_logged_coded_500(
    db, caplog, answered
):
    """Every request fails alike (even one signed with the good secret): a
    JSON 500 with the code, so the sender retries, and an ERROR with the
    traceback; the secret is never echoed."""
    calls = Calls()
    pattern = webhook_receiver(
        name="hooks",
        path="hooks/in/",
        verify=StandardWebhooks(lambda: answered, now=lambda: NOW),
        handle=calls,
    )
    with caplog.at_level(logging.ERROR, logger="django_ultimate_jobs"):
        response, _ = _post(pattern.callback)
    assert (response.status_code, response["Content-Type"], response.content) == (
        500,
        "application/json",
        b'{"error": "X_WEBHOOK_RECEIVER_INVALID"}',
    )
    (record,) = [
        r for r in caplog.records if r.msg == "jobs.webhook.receiver.misconfigured"
    ]
    assert (record.levelname, record.receiver, record.code) == (
        "ERROR",
        "hooks",
        "X_WEBHOOK_RECEIVER_INVALID",
    )
    assert record.exc_info is not None
    assert "bm90LWEta2V5" not in caplog.text
    assert calls.events == [] and not InboundDelivery.objects.exists()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 400),
        ({"webhook-id": "msg_1", "webhook-timestamp": str(NOW)}, 400),
        ({**_signed(), "webhook-signature": "v1,%%%"}, 401),
        (
            {
                **_signed(),
                "webhook-signature": "v2," + base64.b64encode(b"x" * 32).decode(),
            },
            401,
        ),
        ({**_signed(), "webhook-signature": "garbage"}, 401),
        ({**_signed(), "webhook-signature": ","}, 401),
        ({**_signed(), "webhook-signature": " " * 10}, 401),
        ({**_signed(), "webhook-timestamp": "soon"}, 401),
        ({**_signed(), "webhook-timestamp": "1e3"}, 401),
        ({**_signed(), "webhook-timestamp": "9" * 40}, 401),
        ({**_signed(), "webhook-id": "id with spaces"}, 400),
        ({**_signed(), "webhook-id": "é"}, 400),
        ({**_signed(), "webhook-signature": "v1," + "A" * 10_000}, 401),
    ],
)
def test_missing_or_malformed_headers_are_400_or_401_never_500(db, headers, status):
    response, _ = _post(_view(Calls()), headers=headers)
    assert response.status_code == status


def test_an_oversized_body_is_413_before_it_is_read(db):
    body = b"x" * 5000
    response, stream = _post(
        _view(Calls(), max_bytes=1024), body=body, headers=_signed(body=body)
    )
    assert response.status_code == 413
    assert stream.bytes_read == 0


def test_a_chunked_oversized_body_is_413_after_reading_at_most_limit_plus_one(db):
    body = b"x" * 50_000
    response, stream = _post(
        _view(Calls(), max_bytes=1024),
        body=body,
        headers=_signed(body=body),
        length=False,
        chunked=True,
    )
    assert response.status_code == 413
    assert stream.bytes_read <= 1025


def test_a_chunked_body_within_the_limit_is_read_whole(db):
    calls = Calls()
    response, stream = _post(_view(calls), length=False, chunked=True)
    assert response.status_code == 200
    assert calls.events[0].body == BODY and stream.bytes_read == len(BODY)


def test_a_chunked_body_the_server_does_not_decode_is_411(db):
    response, stream = _post(
        _view(Calls()), length=False, chunked=True, terminated=False
    )
    assert response.status_code == 411 and stream.bytes_read == 0


def test_a_handle_that_raises_rolls_back_and_the_retry_succeeds(db):
    failing = Calls(fail=True)
    view = _view(failing)
    response, _ = _post(view)
    assert response.status_code == 500
    assert not InboundDelivery.objects.exists()  # the dedupe row rolled back too
    failing.fail = False
    assert _post(view)[0].content == b'{"status": "accepted"}'
    assert len(failing.events) == 2


def test_only_post_is_served(db):
    response, _ = _post(_view(Calls()), method="GET")
    assert response.status_code == 405 and response["Allow"] == "POST"


def test_the_answer_comes_after_the_commit(transactional_db):
    """The handle runs inside the transaction that holds the dedupe row (another
    connection cannot see it yet); by the time the 200 is returned it can."""
    url = database_url(connection.settings_dict)
    seen = []

    def handle(event):
        assert connection.in_atomic_block
        with psycopg.connect(url, autocommit=True) as other:
            seen.append(
                other.execute(
                    "SELECT count(*) FROM ultimate_jobs_inbound_delivery"
                ).fetchone()[0]
            )

    response, _ = _post(_view(handle))
    assert response.status_code == 200
    with psycopg.connect(url, autocommit=True) as other:
        after = other.execute(
            "SELECT count(*) FROM ultimate_jobs_inbound_delivery"
        ).fetchone()[0]
    assert (seen, after) == ([0], 1)


def test_a_job_handle_refuses_a_body_that_is_not_utf8(db, declare_jobs):
    @declare_jobs("default", "tests.inbound_bytes")()
    def on_bytes(ctx, *, webhook_id: str, body: str):
        return None

    body = b"\xff\xfe"
    response, _ = _post(_view(on_bytes), body=body, headers=_signed(body=body))
    assert response.status_code == 400
    assert not InboundDelivery.objects.exists()


@pytest.mark.parametrize(
    "options",
    [
        {"name": "", "path": "hooks/", "verify": SECRET, "handle": print},
        {"name": "x", "path": "/hooks/", "verify": SECRET, "handle": print},
        {"name": "x", "path": "hooks/", "verify": None, "handle": print},
        {"name": "x", "path": "hooks/", "verify": SECRET, "handle": "nope"},
        {
            "name": "x",
            "path": "hooks/",
            "verify": SECRET,
            "handle": print,
            "max_bytes": 0,
        },
        {
            "name": "x",
            "path": "hooks/",
            "verify": SECRET,
            "handle": print,
            "max_bytes": True,
        },
        {"name": "x", "path": "hooks/", "verify": "whsec_short", "handle": print},
        {"name": "x", "path": "hooks/", "verify": [], "handle": print},
    ],
)
def test_bad_declarations_are_refused_with_a_code(options):
    with pytest.raises(WebhookReceiverInvalid) as caught:
        webhook_receiver(**options)
    assert caught.value.code == "X_WEBHOOK_RECEIVER_INVALID"
    assert "whsec_short" not in caught.value.render()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"a": "x\x00y"}', id="raw-nul"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
    ],
)
def test_a_body_the_job_refuses_is_a_coded_400_not_a_500(
    db, declare_jobs, body, caplog
):
    """A 500 makes a Standard Webhooks sender retry a poison request for
    hours: a refused input is answered 4xx, nothing kept, no traceback."""

    @declare_jobs("default", "tests.inbound_nul")()
    def on_text(ctx, *, webhook_id: str, body: str):
        return None

    response, _ = _post(_view(on_text), body=body, headers=_signed(body=body))
    assert (response.status_code, response.content) == (
        400,
        b'{"error": "X_JOB_INPUT_INVALID"}',
    )
    assert not InboundDelivery.objects.exists()
    assert not Job.objects.exists()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_a_body_refused_by_the_input_schema_is_a_coded_400(db, declare_jobs):
    def schema(given):
        if len(given["body"]) > 5:
            raise ValueError("body too long")

    @declare_jobs("default", "tests.inbound_schema")(input_schema=schema)
    def on_short(ctx, *, webhook_id: str, body: str):
        return None

    response, _ = _post(_view(on_short))
    assert (response.status_code, response.content) == (
        400,
        b'{"error": "X_JOB_INPUT_INVALID"}',
    )
    assert not InboundDelivery.objects.exists()


def test_a_job_handle_that_cannot_take_a_delivery_is_refused_at_import(
    declare_jobs,
):
    @declare_jobs("default", "tests.inbound_shape")()
    def on_other(ctx, *, event: str):
        return None

    with pytest.raises(WebhookReceiverInvalid) as caught:
        webhook_receiver(name="x", path="hooks/", verify=SECRET, handle=on_other)
    assert caught.value.code == "X_WEBHOOK_RECEIVER_INVALID"
    assert "webhook_id" in caught.value.render()
