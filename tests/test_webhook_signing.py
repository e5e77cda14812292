"""Standard Webhooks signatures: the published vector, the reference library, edges.

The specification's test vector (secret, id, timestamp, body -> signature)
pins the key decoding, the signed string and the base64 alphabet; the
reference Python implementation (``standardwebhooks``, a test dependency)
proves both directions: it verifies what we sign, we verify what it signs.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from django_ultimate_jobs.webhooks.errors import (
    WebhookEventInvalid,
    WebhookSignatureInvalid,
    WebhookSignatureMissing,
    WebhookSignatureStale,
)
from django_ultimate_jobs.webhooks.signing import (
    mask_secret,
    new_secret,
    secret_key,
    sign,
    signature_header,
    verify,
)

# The Standard Webhooks specification's published test vector.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def _headers(msg_id: str, timestamp: int, signature: str) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def test_signing_reproduces_the_published_vector():
    assert (
        sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY)
        == VECTOR_SIGNATURE
    )


def test_verification_accepts_the_published_vector():
    message = verify(
        _headers(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_SIGNATURE),
        VECTOR_BODY,
        [VECTOR_SECRET],
        now=lambda: VECTOR_TIMESTAMP,
    )
    assert (message.id, message.timestamp) == (VECTOR_ID, VECTOR_TIMESTAMP)


def test_the_reference_library_verifies_what_we_sign():
    secret = new_secret()
    now = int(datetime.now(UTC).timestamp())
    body = b'{"type": "invoice.paid", "data": {"id": 42, "note": "\xc3\xa9t\xc3\xa9"}}'
    header = signature_header([secret], "msg_ours", now, body)
    assert Webhook(secret).verify(body, _headers("msg_ours", now, header)) == {
        "type": "invoice.paid",
        "data": {"id": 42, "note": "été"},
    }


def test_we_verify_what_the_reference_library_signs():
    secret = new_secret()
    when = datetime.now(UTC).replace(microsecond=0)
    body = '{"type": "ping", "n": 1}'
    signature = Webhook(secret).sign("msg_theirs", when, body)
    stamp = int(when.timestamp())
    message = verify(_headers("msg_theirs", stamp, signature), body.encode(), [secret])
    assert message.id == "msg_theirs"


def test_the_reference_library_accepts_either_signature_during_a_rotation():
    old, new = new_secret(), new_secret()
    now = int(datetime.now(UTC).timestamp())
    header = signature_header([new, old], "msg_rot", now, b"{}")
    assert len(header.split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(b"{}", _headers("msg_rot", now, header))
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(b"{}", _headers("msg_rot", now, header))


def test_new_secrets_are_whsec_with_32_random_bytes():
    first, second = new_secret(), new_secret()
    assert first.startswith("whsec_") and first != second
    assert len(secret_key(first)) == 32


@pytest.mark.parametrize(
    "secret",
    [
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  # no prefix
        "whsec_",  # empty
        "whsec_not base64!",
        "whsec_" + base64.b64encode(b"x" * 8).decode(),  # 8 bytes: too short
        "whsec_" + base64.b64encode(b"x" * 65).decode(),  # too long
    ],
)
def test_malformed_secrets_are_refused_without_echoing_them(secret):
    with pytest.raises(ValueError) as caught:
        secret_key(secret)
    assert secret[6:] not in str(caught.value) or not secret[6:]


def test_a_masked_secret_shows_a_fingerprint_and_no_key_material():
    secret = new_secret()
    masked = mask_secret(secret)
    assert masked.startswith("whsec_…") and len(masked) == len("whsec_…") + 8
    assert secret[6:12] not in masked
    assert masked != mask_secret(new_secret())
    assert mask_secret(None) == "—"


# -- verification edges ------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
NOW = 1_800_000_000
BODY = b'{"amount": 100}'


def _signed(
    msg_id: str = "msg_1", stamp: int = NOW, body: bytes = BODY
) -> dict[str, str]:
    return _headers(msg_id, stamp, sign(SECRET, msg_id, stamp, body))


def _flip_one_bit(signature: str) -> str:
    raw = bytearray(base64.b64decode(signature[3:]))
    raw[0] ^= 0x01
    return "v1," + base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(
            lambda h: {**h, "webhook-signature": _flip_one_bit(h["webhook-signature"])},
            id="one-bit-flipped",
        ),
        pytest.param(
            lambda h: {
                **h,
                "webhook-signature": sign(new_secret(), "msg_1", NOW, BODY),
            },
            id="wrong-secret",
        ),
        pytest.param(lambda h: {**h, "webhook-id": "msg_2"}, id="other-id"),
        pytest.param(
            lambda h: {**h, "webhook-timestamp": str(NOW - 1)}, id="other-timestamp"
        ),
    ],
)
def test_forgeries_are_refused(forge):
    with pytest.raises(WebhookSignatureInvalid):
        verify(forge(_signed()), BODY, [SECRET], now=lambda: NOW)


def test_another_body_is_refused():
    with pytest.raises(WebhookSignatureInvalid):
        verify(_signed(), b'{"amount": 1000}', [SECRET], now=lambda: NOW)


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [(-300, True), (-301, False), (300, True), (301, False), (0, True)],
)
def test_the_tolerance_is_five_minutes_either_way(offset, accepted):
    stamp = NOW + offset
    headers = _signed(stamp=stamp)
    if accepted:
        assert verify(headers, BODY, [SECRET], now=lambda: NOW).timestamp == stamp
    else:
        with pytest.raises(WebhookSignatureStale):
            verify(headers, BODY, [SECRET], now=lambda: NOW)


def test_one_match_among_several_signatures_and_secrets_passes():
    other = new_secret()
    header = " ".join(
        [
            "v2,abcd",  # an unknown version: skipped
            "v1,not-base64!",  # malformed: skipped
            sign(other, "msg_1", NOW, BODY),
        ]
    )
    headers = _headers("msg_1", NOW, header)
    assert verify(headers, BODY, [SECRET, other], now=lambda: NOW).id == "msg_1"
    with pytest.raises(WebhookSignatureInvalid):
        verify(headers, BODY, [SECRET], now=lambda: NOW)


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({}, WebhookSignatureMissing),
        (
            {"webhook-id": "msg_1", "webhook-timestamp": str(NOW)},
            WebhookSignatureMissing,
        ),
        (_headers("msg_1", NOW, ""), WebhookSignatureMissing),
        ({**_signed(), "webhook-timestamp": "1.8e9"}, WebhookSignatureInvalid),
        ({**_signed(), "webhook-timestamp": "-1"}, WebhookSignatureInvalid),
        ({**_signed(), "webhook-timestamp": "1" * 16}, WebhookSignatureInvalid),
        ({**_signed(), "webhook-id": "msg 1"}, WebhookEventInvalid),
        ({**_signed(), "webhook-id": "x" * 201}, WebhookEventInvalid),
        ({**_signed(), "webhook-timestamp": "\u0661" * 10}, WebhookSignatureInvalid),
        ({**_signed(), "webhook-signature": "v1"}, WebhookSignatureInvalid),
        ({**_signed(), "webhook-signature": "v9,abcd"}, WebhookSignatureInvalid),
        ({**_signed(), "webhook-signature": "v1,@@@"}, WebhookSignatureInvalid),
        (
            {**_signed(), "webhook-signature": "v1," + "A" * 5000},
            WebhookSignatureInvalid,
        ),
    ],
)
def test_missing_and_malformed_headers_are_coded_refusals(headers, error):
    with pytest.raises(error):
        verify(headers, BODY, [SECRET], now=lambda: NOW)
