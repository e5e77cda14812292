"""Standard Webhooks signatures: secrets, signing, verification (pure).

The scheme (https://www.standardwebhooks.com): a secret is ``whsec_`` and
the base64 of 24 to 64 random bytes; a request carries ``webhook-id``,
``webhook-timestamp`` (Unix seconds) and ``webhook-signature``, a
space-separated list of ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``,
one per secret in use (two while a rotated secret overlaps its successor).
A receiver accepts the request when any listed signature matches any of its
secrets and the timestamp is within the tolerance either way. Svix's default
header names (``svix-id``, ``svix-timestamp``, ``svix-signature``; the same
scheme) are read when none of the ``webhook-`` ones is present.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import (
    WebhookEventInvalid,
    WebhookSignatureInvalid,
    WebhookSignatureMissing,
    WebhookSignatureStale,
)

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "SECRET_PREFIX",
    "VerifiedMessage",
    "canonical_problem",
    "mask_secret",
    "new_secret",
    "secret_key",
    "sign",
    "signature_header",
    "verify",
]

SECRET_PREFIX = "whsec_"  # noqa: S105 (the scheme's prefix, not a secret)
SECRET_BYTES = 32
"""Random bytes in a secret this package makes."""
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 24, 64
"""The key sizes the Standard Webhooks specification allows."""
DEFAULT_TOLERANCE_S = 300
"""How far a timestamp may be from the receiver's clock, either way."""
MAX_FIELD_LENGTH = 200
"""The longest ``webhook-id`` or topic this package sends or accepts."""
MAX_SIGNATURE_HEADER = 4096
"""The longest ``webhook-signature`` header read (bounded work per request)."""
MAX_TIMESTAMP_DIGITS = 15
"""A timestamp is ASCII digits only, at most 15 of them (leading zeros
allowed, as the reference library allows them): a non-number never
disables the freshness check (upstream's rule). The signed string holds the
number without leading zeros, as the reference library signs it."""
HEADER_NAMES = ("webhook-id", "webhook-timestamp", "webhook-signature")
SVIX_HEADER_NAMES = ("svix-id", "svix-timestamp", "svix-signature")
"""Svix's default names for the same three headers (its ``svix`` library
reads both sets)."""

_FIELD = re.compile(r"[\x21-\x7e]+")
_DIGITS = re.compile(r"[0-9]+")


def new_secret() -> str:
    """A fresh ``whsec_`` secret (32 random bytes)."""
    return SECRET_PREFIX + base64.b64encode(_random.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_...`` secret stands for.

    Raises:
        ValueError: not ``whsec_`` + base64 of 24 to 64 bytes (the message
            never holds the secret).
    """
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a secret starts with {SECRET_PREFIX!r}")
    text = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a secret is whsec_ followed by base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(
            f"a secret's key is {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, "
            f"not {len(key)}"
        )
    return key


def mask_secret(secret: str | None) -> str:
    """``whsec_…`` and a fingerprint: what every page and log shows of a secret.

    The fingerprint (8 hex digits of the SHA-256 of the secret) tells two
    secrets apart without revealing any of the key.
    """
    if not secret:
        return "—"
    digest = hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()[:8]
    return f"{SECRET_PREFIX}…{digest}"


def canonical_problem(value: object, what: str) -> str | None:
    """What is wrong with a ``webhook-id`` or topic, or None.

    1 to 200 printable ASCII characters, no space: the id travels in a
    header and inside the signed string, where a space or a control
    character would change what is signed.
    """
    if not isinstance(value, str):
        return f"{what} must be a string, not {type(value).__name__}"
    if not 1 <= len(value) <= MAX_FIELD_LENGTH:
        return f"{what} must be 1 to {MAX_FIELD_LENGTH} characters, not {len(value)}"
    if not _FIELD.fullmatch(value):
        return f"{what} must be printable ASCII without spaces"
    return None


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "msg_id.timestamp.body">`` under ``secret``."""
    mac = hmac.new(
        secret_key(secret), b"%s.%d.%s" % (msg_id.encode(), timestamp, body), "sha256"
    )
    return "v1," + base64.b64encode(mac.digest()).decode()


def signature_header(
    secrets: Iterable[str], msg_id: str, timestamp: int, body: bytes
) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated."""
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


@dataclass(frozen=True, slots=True)
class VerifiedMessage:
    """A request whose signature matched: its id and signed timestamp."""

    id: str
    timestamp: int


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    return value


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str],
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: Callable[[], float] = time.time,
) -> VerifiedMessage:
    """Check a Standard Webhooks request; answer its id and timestamp.

    ``headers`` is looked up by lower-case name (Django's ``request.headers``
    is case-insensitive); the ``svix-`` names are read when no ``webhook-``
    header is present. A timestamp is 1 to 15 ASCII digits (leading zeros
    allowed; the number is what is signed). Signatures of unknown versions are skipped, as the
    specification asks; the request passes when one ``v1`` signature matches
    one of ``secrets`` (compared in constant time).

    Raises:
        WebhookSignatureMissing: a header is missing or empty.
        WebhookEventInvalid: the ``webhook-id`` is not 1 to 200 printable
            ASCII characters without spaces (answered 400: however it is
            signed, it is not a delivery id this package keeps).
        WebhookSignatureInvalid: a header is malformed, or no signature
            matches.
        WebhookSignatureStale: the timestamp is more than ``tolerance_s``
            seconds from ``now()``, either way.
    """
    names = HEADER_NAMES
    values = [_header(headers, name) for name in names]
    if not any(values):
        svix = [_header(headers, name) for name in SVIX_HEADER_NAMES]
        if any(svix):
            names, values = SVIX_HEADER_NAMES, svix
    msg_id, stamp, listed = values
    missing = [name for name, value in zip(names, values, strict=True) if not value]
    if missing:
        raise WebhookSignatureMissing(
            f"the request lacks {', '.join(missing)}", meta={"missing": missing}
        )
    assert msg_id is not None and stamp is not None and listed is not None
    problem = canonical_problem(msg_id, names[0])
    if problem is not None:
        # Not a signature problem: the id cannot be a delivery id here
        # (it is stored, and enqueued), however it is signed.
        raise WebhookEventInvalid(
            problem,
            fix=f"send a {names[0]} of 1-{MAX_FIELD_LENGTH} printable ASCII "
            "characters without spaces",
        )
    if len(stamp) > MAX_TIMESTAMP_DIGITS or not _DIGITS.fullmatch(stamp):
        raise WebhookSignatureInvalid("webhook-timestamp is not Unix seconds")
    if len(listed) > MAX_SIGNATURE_HEADER:
        raise WebhookSignatureInvalid(
            f"webhook-signature is longer than {MAX_SIGNATURE_HEADER} characters"
        )
    timestamp = int(stamp)
    skew = int(now()) - timestamp
    if abs(skew) > tolerance_s:
        raise WebhookSignatureStale(
            f"webhook-timestamp is {abs(skew)}s {'old' if skew > 0 else 'ahead'}; "
            f"the tolerance is {tolerance_s}s",
            meta={"skew_seconds": skew, "tolerance_seconds": tolerance_s},
        )
    given = _v1_signatures(listed)
    if not given:
        raise WebhookSignatureInvalid("webhook-signature holds no v1 signature")
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    for secret in secrets:
        expected = hmac.new(secret_key(secret), signed, "sha256").digest()
        if any(hmac.compare_digest(expected, candidate) for candidate in given):
            return VerifiedMessage(id=msg_id, timestamp=timestamp)
    raise WebhookSignatureInvalid("no signature matches a secret of this receiver")


def _v1_signatures(listed: str) -> list[bytes]:
    """The decoded ``v1`` signatures of a header; malformed entries skipped."""
    found = []
    for entry in listed.split(" "):
        version, comma, text = entry.partition(",")
        if version != "v1" or not comma:
            continue
        try:
            found.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            continue
    return found
