"""``webhook_receiver(...)``: a URL pattern that verifies, dedupes and hands over.

Per request: POST only; at most ``max_bytes`` of body are read (413 beyond,
for a chunked body too, which is read from ``wsgi.input`` when the server
decodes it, as gunicorn does, reading at most ``max_bytes + 1`` bytes);
the signature is verified (a missing header or a ``webhook-id`` that is
not an acceptable id is a 400, anything else malformed or unmatched a 401;
a secrets callable answering a malformed secret is a logged, coded 500, so
the sender retries once it is fixed); then ONE transaction inserts the
dedupe row (``InboundDelivery``, unique per receiver and ``webhook-id``)
and runs ``handle`` (a job is enqueued, or a callable runs), and only
after it commits is a 2xx sent. A replay of a delivered id answers 200 and does
nothing; a ``handle`` that refuses the input (``X_JOB_INPUT_INVALID``) rolls
everything back and answers 400 (the same request would be refused again);
one that raises anything else rolls back and answers 500, so the sender
retries.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, router, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern
from django.urls import path as url_path
from django.views.decorators.csrf import csrf_exempt

from ..errors import JobInputInvalid, JobsError
from ..jobs import JobHandle
from ..validation import name_problem
from .errors import (
    WebhookEventInvalid,
    WebhookReceiverInvalid,
    WebhookSignatureInvalid,
    WebhookSignatureMissing,
    WebhookSignatureStale,
)
from .signing import DEFAULT_TOLERANCE_S, VerifiedMessage, secret_key, verify

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_MAX_BYTES",
    "InboundEvent",
    "StandardWebhooks",
    "webhook_receiver",
]

logger = logging.getLogger("django_ultimate_jobs")

DEFAULT_MAX_BYTES = 1_048_576
MAX_MAX_BYTES = 64 * 1_048_576
_CHUNK = 65_536

Verifier = Callable[[Mapping[str, str], bytes], VerifiedMessage]


class StandardWebhooks:
    """The Standard Webhooks verifier: any of ``secrets``, within ``tolerance``.

    Args:
        secrets: ``whsec_...`` secrets (several while a sender rotates), or a
            callable answering them, asked on each request (secrets kept in
            a database or a vault).
        tolerance: seconds a timestamp may be off, either way (default 300).
        now: the clock (tests pass a fixed one).

    Raises:
        WebhookReceiverInvalid: a listed secret is not ``whsec_`` + base64
            of 24-64 bytes, or there is none.
    """

    def __init__(
        self,
        secrets: str | Sequence[str] | Callable[[], Sequence[str]],
        *,
        tolerance: int = DEFAULT_TOLERANCE_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(secrets, str):
            secrets = [secrets]
        if not callable(secrets):
            secrets = list(secrets)
            _check_secrets(secrets)
        if (
            isinstance(tolerance, bool)
            or not isinstance(tolerance, int)
            or tolerance < 1
        ):
            raise WebhookReceiverInvalid("tolerance is a whole number of seconds >= 1")
        self._secrets = secrets
        self.tolerance = tolerance
        self.now = now

    def secrets(self) -> list[str]:
        """The secrets to try on this request."""
        if callable(self._secrets):
            listed = list(self._secrets())
            _check_secrets(listed)
            return listed
        return list(self._secrets)

    def __call__(self, headers: Mapping[str, str], body: bytes) -> VerifiedMessage:
        """Verify one request (see :func:`~django_ultimate_jobs.webhooks.verify`)."""
        return verify(
            headers, body, self.secrets(), tolerance_s=self.tolerance, now=self.now
        )

    def __repr__(self) -> str:
        return f"<StandardWebhooks tolerance={self.tolerance}s>"


def _check_secrets(secrets: Sequence[str]) -> None:
    if not secrets:
        raise WebhookReceiverInvalid("a receiver needs at least one secret")
    for index, secret in enumerate(secrets):
        try:
            secret_key(secret)
        except ValueError as error:
            raise WebhookReceiverInvalid(
                f"secret {index} is refused: {error}"
            ) from None


@dataclass(frozen=True)
class InboundEvent:
    """A verified request, as a callable ``handle`` receives it."""

    receiver: str
    id: str
    timestamp: int
    body: bytes
    headers: Mapping[str, str] = field(repr=False)

    def text(self) -> str:
        """The body as text (UTF-8)."""
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def _error(status: int, code: str) -> JsonResponse:
    return JsonResponse({"error": code}, status=status)


def _read_body(request: HttpRequest, limit: int) -> bytes | HttpResponse:
    """At most ``limit`` bytes of body, or the response refusing it."""
    declared = request.META.get("CONTENT_LENGTH")
    stream: Any = request
    if declared:
        if not declared.isdigit():
            return _error(400, "Content-Length is not a number")
        if int(declared) > limit:
            return _error(413, f"the body is over {limit} bytes")
    elif "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        environ = getattr(request, "environ", {})
        if not environ.get("wsgi.input_terminated"):
            # Django reads no body without a length; a server that does
            # not decode chunks for the application cannot serve it.
            return _error(411, "a chunked body needs a server that decodes it")
        stream = environ["wsgi.input"]
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        return _error(413, f"the body is over {limit} bytes")
    return b"".join(chunks)


def _check_declaration(
    name: Any, path: Any, verify: Any, handle: Any, max_bytes: Any
) -> None:
    problems = []
    problem = name_problem(name)
    if problem is not None:
        problems.append(f"name {problem}")
    if not isinstance(path, str) or path.startswith("/"):
        problems.append("path must be a route string without a leading '/'")
    if verify is None:
        problems.append(
            "verify is required: secrets, StandardWebhooks(...) or a callable"
        )
    if isinstance(handle, JobHandle):
        try:
            # Every delivery enqueues exactly these keywords: a job that
            # does not take them would refuse every request (and the sender
            # would give the events up), so it is refused here, at import.
            handle.shape.check(handle.name, {"webhook_id": "", "body": ""})
        except JobInputInvalid as error:
            problems.append(f"handle {error.cause} (webhook_id and body)")
    elif not callable(handle):
        problems.append("handle must be a job or a callable")
    if (
        isinstance(max_bytes, bool)
        or not isinstance(max_bytes, int)
        or not 1 <= max_bytes <= MAX_MAX_BYTES
    ):
        problems.append(f"max_bytes must be a whole number from 1 to {MAX_MAX_BYTES}")
    if problems:
        raise WebhookReceiverInvalid(
            f"webhook_receiver {name!r} is invalid: " + "; ".join(problems),
            meta={"receiver": str(name), "problems": problems},
        )


def webhook_receiver(
    *,
    name: str,
    path: str,
    verify: str | Sequence[str] | StandardWebhooks | Verifier,
    handle: JobHandle[Any] | Callable[[InboundEvent], Any],
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> URLPattern:
    """A URL pattern receiving one provider's webhooks (add it to ``urlpatterns``).

    Args:
        name: the receiver's name (the URL name, and the namespace of the
            ids it dedupes).
        path: the route, as for ``django.urls.path`` (``"hooks/billing/"``).
        verify: the secret(s) of the Standard Webhooks scheme, a
            :class:`StandardWebhooks`, or a callable ``(headers, body) ->
            VerifiedMessage`` that raises ``WebhookSignatureMissing`` /
            ``WebhookEventInvalid`` (400) or ``WebhookSignatureInvalid`` /
            ``WebhookSignatureStale`` (401).
        handle: a job (enqueued with ``webhook_id=`` and ``body=`` the text)
            or a callable taking an :class:`InboundEvent`; either runs in the
            transaction that records the delivery id.
        max_bytes: the largest body read (413 beyond); default 1 MiB.

    Raises:
        WebhookReceiverInvalid: a bad argument (at import).
    """
    _check_declaration(name, path, verify, handle, max_bytes)
    verifier: Verifier
    if isinstance(verify, str | list | tuple):
        verifier = StandardWebhooks(verify)
    elif callable(verify):
        verifier = verify
    else:
        raise WebhookReceiverInvalid(
            f"webhook_receiver {name!r}: verify must be secrets or a callable"
        )
    view = _ReceiverView(name, verifier, handle, max_bytes)
    return url_path(path, transaction.non_atomic_requests(csrf_exempt(view)), name=name)


class _ReceiverView:
    def __init__(
        self, name: str, verifier: Verifier, handle: Any, max_bytes: int
    ) -> None:
        self.name = name
        self.verifier = verifier
        self.handle = handle
        self.max_bytes = max_bytes

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            response = _error(405, "POST only")
            response["Allow"] = "POST"
            return response
        body = _read_body(request, self.max_bytes)
        if isinstance(body, HttpResponse):
            return body
        try:
            message = self.verifier(request.headers, body)
        except (WebhookSignatureMissing, WebhookEventInvalid) as error:
            return _error(400, error.code)
        except (WebhookSignatureInvalid, WebhookSignatureStale) as error:
            return _error(401, error.code)
        except UnicodeError:
            return _error(401, WebhookSignatureInvalid.code)
        except WebhookReceiverInvalid as error:
            # The secrets callable answered a malformed secret (or none): every
            # request fails alike until it is fixed. A 500 keeps the sender
            # retrying meanwhile; the message never holds a secret.
            logger.exception(
                "jobs.webhook.receiver.misconfigured",
                extra={"receiver": self.name, "code": error.code},
            )
            return _error(500, error.code)
        if isinstance(self.handle, JobHandle):
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                return _error(400, JobInputInvalid.code)
        try:
            event = InboundEvent(
                receiver=self.name,
                id=message.id,
                timestamp=message.timestamp,
                body=body,
                headers=dict(request.headers),
            )
            created = self._record(event)
        except JobInputInvalid as error:
            # The input was refused (a NUL in the body, which PostgreSQL
            # cannot store; the job's input_schema...): the same request
            # is refused every time, so it is a 4xx, never a 500 that a
            # Standard Webhooks sender retries for hours.
            logger.warning(
                "jobs.webhook.receiver.input-refused",
                extra={"receiver": self.name, "code": error.code},
            )
            return _error(400, error.code)
        except Exception as error:
            logger.exception(
                "jobs.webhook.receiver.handle-failed",
                extra={"receiver": self.name, "code": getattr(error, "code", None)},
            )
            code = error.code if isinstance(error, JobsError) else "handle failed"
            return _error(500, code)
        # Reached only after the transaction committed.
        return JsonResponse({"status": "accepted" if created else "duplicate"})

    def _record(self, event: InboundEvent) -> bool:
        """Insert the dedupe row and run ``handle`` in one transaction;
        False when the id was delivered already (nothing runs)."""
        from .models import InboundDelivery

        with transaction.atomic(using=router.db_for_write(InboundDelivery)):
            try:
                with transaction.atomic(using=router.db_for_write(InboundDelivery)):
                    row = InboundDelivery.objects.create(
                        receiver=self.name,
                        webhook_id=event.id,
                        signed_at=datetime.fromtimestamp(event.timestamp, UTC),
                        size=len(event.body),
                    )
            except IntegrityError:
                return False
            if isinstance(self.handle, JobHandle):
                answer = self.handle.enqueue(webhook_id=event.id, body=event.text())
                row.job_id = answer.id
                row.save(update_fields=["job_id"])
            else:
                self.handle(event)
        return True
