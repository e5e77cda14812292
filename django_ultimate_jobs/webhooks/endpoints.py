"""Endpoints: creation (the secret is answered once), rotation, enable, disable.

A rotation keeps the replaced secret for an overlap window
(``WEBHOOK_SECRET_OVERLAP``, default 24 hours): every request sent in it is
signed with both secrets (two signatures in ``webhook-signature``), so a
receiver can switch at its own pace without refusing a single delivery.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from django.db import transaction
from django.utils import timezone

from ..conf import jobs_settings
from ..durations import DurationInput, parse_duration_ms
from .addresses import parse_url, system_resolver, vet
from .errors import WebhookEndpointInvalid
from .signing import canonical_problem, new_secret, secret_key

if TYPE_CHECKING:
    from .models import WebhookEndpoint

__all__ = [
    "ALL_TOPICS",
    "OWNED_HEADERS",
    "check_endpoint_fields",
    "create_endpoint",
    "disable_endpoint",
    "enable_endpoint",
    "rotate_secret",
    "signing_secrets",
]

ALL_TOPICS = "*"
"""The topic entry that subscribes an endpoint to every topic."""
OWNED_HEADERS = frozenset(
    {
        "host",
        "content-type",
        "content-length",
        "user-agent",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "transfer-encoding",
        "connection",
    }
)
"""Headers the sender sets itself: an endpoint's ``headers`` cannot hold them."""
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP field name (RFC 9110 section 5.1: a token)."""
_FIELD_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?")
"""A field value kept to visible ASCII with inner spaces and tabs (RFC 9110
section 5.5 without obs-text, which each client encodes its own way)."""


_FIELDS_FIX = (
    'topics: a list of exact topic names, or ["*"]; headers: a dict of HTTP '
    "field names to visible-ASCII values, none the sender sets itself"
)


def _field_error(
    cause: str, meta: Mapping[str, str] | None = None
) -> WebhookEndpointInvalid:
    """A refused topic or header (the fix names those, not the URL)."""
    return WebhookEndpointInvalid(cause, fix=_FIELDS_FIX, meta=meta)


def _allow_http() -> bool:
    from django.conf import settings

    return bool(settings.DEBUG) or jobs_settings().webhook_allow_http


def check_endpoint_fields(
    url: str, topics: Iterable[str], headers: Mapping[str, str] | None = None
) -> list[str]:
    """Check what an endpoint is made of; answer its topics as a list.

    Raises:
        WebhookEndpointInvalid: a bad URL (see :func:`parse_url`), an IP
            address in it that is not public (nor in ``WEBHOOK_ALLOW_NETWORKS``
            or a declaration's ``allow_networks``), no topic, a topic that is
            not 1-200 printable characters or holds a ``*`` (only ``"*"``
            alone means every topic), or a header the sender owns or cannot
            send.
    """
    target = parse_url(url, allow_http=_allow_http())
    if target.literal is not None:
        # An address written in the URL needs no lookup to be judged: refuse
        # it now rather than at every send. A name is judged at each send
        # (it may resolve elsewhere tomorrow).
        from .declaration import declared_allow_networks

        allowed = (*jobs_settings().webhook_allow_networks, *declared_allow_networks())
        vet(target, resolve=system_resolver, allow=allowed, url=url)
    if isinstance(topics, str) or not isinstance(topics, Iterable):
        raise _field_error(
            'topics is a list of topic names (["*"]: every topic), not '
            f"{type(topics).__name__}"
        )
    listed = list(topics)
    if not listed:
        raise _field_error(
            'topics is empty: list the topics the endpoint receives, or ["*"] '
            "for every topic"
        )
    for topic in listed:
        problem = canonical_problem(topic, "a topic")
        if problem is not None:
            raise _field_error(problem)
        if "*" in topic and topic != ALL_TOPICS:
            raise _field_error(
                f'the topic {topic!r} holds a "*": topics match exactly, and "*" '
                "alone subscribes to every topic",
                meta={"topic": topic},
            )
    if headers is not None and not isinstance(headers, Mapping):
        raise _field_error(
            f"endpoint headers are a dict of name: value, not {type(headers).__name__}"
        )
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise _field_error("endpoint headers are strings")
        if name.lower() in OWNED_HEADERS:
            raise _field_error(
                f"the endpoint header {name!r} is set by the sender",
                meta={"header": name},
            )
        if not _TOKEN.fullmatch(name):
            # RFC 9110 field names are tokens: a space or a colon would
            # make the request malformed or smuggle a header of its own.
            raise _field_error(
                "an endpoint header name is not an HTTP field name (RFC 9110 "
                "token: letters, digits and !#$%&'*+-.^_`|~)",
                meta={"header": name.encode("ascii", "backslashreplace").decode()},
            )
        if not _FIELD_VALUE.fullmatch(value):
            raise _field_error(
                f"the endpoint header {name!r} has a value that is not visible "
                "ASCII, spaces and tabs (no line break, NUL or control character, "
                "no surrounding spaces)",
                meta={"header": name},
            )
    return list(dict.fromkeys(listed))


def create_endpoint(
    url: str,
    *,
    topics: Iterable[str] = (ALL_TOPICS,),
    description: str = "",
    headers: Mapping[str, str] | None = None,
    secret: str | None = None,
) -> tuple[WebhookEndpoint, str]:
    """Create an endpoint; answer it and its secret, the one time it is given.

    Args:
        url: an ``https://`` URL (``http://`` in DEBUG or with
            ``WEBHOOK_ALLOW_HTTP``); its address is screened at each send.
        topics: the topics it receives, matched exactly (the default
            ``["*"]``: every topic).
        description: a note for operators.
        headers: extra request headers (not the ones the sender sets).
        secret: a ``whsec_`` secret to use (default: a new random one).

    Raises:
        WebhookEndpointInvalid: see :func:`check_endpoint_fields`; a
            ``secret`` that is not ``whsec_`` + base64 of 24-64 bytes.
    """
    from .models import WebhookEndpoint

    listed = check_endpoint_fields(url, topics, headers)
    if secret is None:
        secret = new_secret()
    else:
        _check_secret(secret)
    endpoint = WebhookEndpoint.objects.create(
        url=url,
        topics=listed,
        description=description,
        headers=dict(headers or {}),
        secret=secret,
    )
    return endpoint, secret


def _check_secret(secret: str) -> None:
    try:
        secret_key(secret)
    except ValueError as error:
        raise WebhookEndpointInvalid(f"the secret is refused: {error}") from None


def rotate_secret(
    endpoint: WebhookEndpoint, *, overlap: DurationInput | None = None
) -> str:
    """Give the endpoint a new secret; answer it (the one time it is given).

    The replaced secret keeps signing beside the new one for ``overlap``
    (default ``WEBHOOK_SECRET_OVERLAP``; ``0`` ends it at once).

    Raises:
        WebhookEndpointInvalid: ``endpoint`` is not a saved endpoint that
            still exists.
        DurationInvalid: a bad ``overlap``.
    """
    from .models import WebhookEndpoint

    if not isinstance(endpoint, WebhookEndpoint) or endpoint.pk is None:
        raise WebhookEndpointInvalid(
            "rotate_secret() takes a saved WebhookEndpoint, got "
            f"{type(endpoint).__name__}"
        )
    if overlap is None:
        overlap_ms = jobs_settings().webhook_secret_overlap_ms
    else:
        overlap_ms = parse_duration_ms(overlap, what="overlap", allow_zero=True)
    secret = new_secret()
    now = timezone.now()
    with transaction.atomic():
        row = WebhookEndpoint.objects.select_for_update().filter(pk=endpoint.pk).first()
        if row is None:
            raise WebhookEndpointInvalid(
                f"endpoint {endpoint.pk} no longer exists",
                meta={"endpoint_id": endpoint.pk},
            )
        row.previous_secret = row.secret if overlap_ms else None
        row.previous_secret_until = (
            now + timedelta(milliseconds=overlap_ms) if overlap_ms else None
        )
        row.secret = secret
        row.updated_at = now
        row.save(
            update_fields=[
                "previous_secret",
                "previous_secret_until",
                "secret",
                "updated_at",
            ]
        )
    endpoint.secret = secret
    endpoint.previous_secret = row.previous_secret
    endpoint.previous_secret_until = row.previous_secret_until
    return secret


class _Secrets(Protocol):
    """What signing reads of an endpoint (a model or the sender's row)."""

    @property
    def secret(self) -> str: ...
    @property
    def previous_secret(self) -> str | None: ...
    @property
    def previous_secret_until(self) -> datetime | None: ...


def signing_secrets(endpoint: _Secrets, now: datetime) -> list[str]:
    """The secrets a request is signed with now: the current one, and the
    replaced one while its overlap lasts."""
    secrets = [endpoint.secret]
    until = endpoint.previous_secret_until
    if endpoint.previous_secret and until is not None and now < until:
        secrets.append(endpoint.previous_secret)
    return secrets


def disable_endpoint(endpoint_id: int, reason: str) -> bool:
    """Disable an endpoint; True if this call disabled it (it was enabled)."""
    from .models import WebhookEndpoint

    return bool(
        WebhookEndpoint.objects.filter(pk=endpoint_id, disabled_at=None).update(
            disabled_at=timezone.now(),
            disabled_reason=reason[:500],
            updated_at=timezone.now(),
        )
    )


def enable_endpoint(endpoint_id: int) -> bool:
    """Enable an endpoint and forget its failure streak; True if it was disabled."""
    from .models import WebhookEndpoint

    return bool(
        WebhookEndpoint.objects.filter(pk=endpoint_id)
        .exclude(disabled_at=None)
        .update(
            disabled_at=None,
            disabled_reason="",
            consecutive_failures=0,
            updated_at=timezone.now(),
        )
    )
