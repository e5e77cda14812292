"""``webhook(...)``: a delivery job; ``deliver(topic, body)``: its fan-out.

One delivery is one event to one endpoint, and one job: retries, backoff,
the attempt log and auto-disable are properties of one endpoint (upstream
§27.1). ``deliver()`` writes a ``WebhookDelivery`` row per subscribed
endpoint and enqueues their jobs in the caller's transaction: a rollback
sends nothing, a commit sends every one.
"""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import router, transaction
from django.db.models import Q
from django.utils import timezone

from ..conf import NETWORKS_FIX, NetworksInvalid, parse_networks
from ..drivers.base import DEFAULT_QUEUE
from ..durations import DurationInput, parse_duration_ms
from ..errors import DurationInvalid
from ..jobs import JobHandle, job
from ..retry import Retry
from .addresses import IPNetwork, Resolver, system_resolver
from .delivery import Sender
from .endpoints import ALL_TOPICS
from .errors import WebhookDeclarationInvalid, WebhookEventInvalid
from .signing import canonical_problem

if TYPE_CHECKING:
    from .models import WebhookDelivery, WebhookEndpoint

__all__ = [
    "DEFAULT_RETRY",
    "DEFAULT_WEBHOOK",
    "MAX_BODY_BYTES",
    "TEST_TOPIC",
    "WebhookHandle",
    "deliver",
    "registered_webhooks",
    "replay",
    "send_test",
    "webhook",
]

DEFAULT_WEBHOOK = "ultimate_jobs.webhook"
"""The built-in declaration :func:`deliver` uses unless told another."""
DEFAULT_RETRY = Retry(attempts=12, backoff="exponential", delay="10s", max_delay="6h")
"""About 5.7 hours of retries: 10 s, 20 s, 40 s ... doubling up to 6 h."""
MAX_BODY_BYTES = 1_048_576
"""The largest body ``deliver()`` takes (a receiver's default limit)."""
TEST_TOPIC = "webhook.test"

_HANDLES: dict[str, WebhookHandle] = {}


class WebhookHandle:
    """A declared webhook: ``deliver()`` fans an event out. Built by :func:`webhook`."""

    def __init__(self, name: str, sender: Sender) -> None:
        self.name = name
        self.sender = sender
        self.job: JobHandle[Any] = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<WebhookHandle {self.name}>"

    def deliver(
        self,
        topic: str,
        body: Any,
        *,
        id: str | None = None,
        endpoints: Iterable[WebhookEndpoint | int] | None = None,
    ) -> list[WebhookDelivery]:
        """Enqueue one delivery per enabled endpoint subscribed to ``topic``.

        Inside ``transaction.atomic()`` the rows and their jobs commit or
        roll back with the caller.

        Args:
            topic: 1-200 printable ASCII characters, no space.
            body: the text to send (a ``str``, sent as is), or a JSON-safe
                value (sent as ``json.dumps(body)``); at most 1 MiB.
            id: the ``webhook-id`` (default ``msg_`` + a random id). An id
                already delivered to an endpoint is not delivered again.
            endpoints: only these endpoints (rows or ids), still filtered by
                topic and enabled (an id no endpoint has is skipped).

        Returns:
            The deliveries written (none when no endpoint subscribes).

        Raises:
            WebhookEventInvalid: a bad topic, id, body (or one nested too
                deep to encode) or ``endpoints``; nothing written.
        """
        text = _body_text(body)
        _check_field(topic, "topic")
        msg_id = id if id is not None else f"msg_{uuid.uuid4().hex}"
        _check_field(msg_id, "id")
        from .models import WebhookEndpoint

        rows = WebhookEndpoint.objects.filter(disabled_at=None).filter(
            Q(topics__contains=[topic]) | Q(topics__contains=[ALL_TOPICS])
        )
        if endpoints is not None:
            rows = rows.filter(pk__in=_endpoint_ids(endpoints))
        return self._write(rows.values_list("pk", flat=True), topic, msg_id, text)

    def _write(
        self, endpoint_ids: Iterable[int], topic: str, msg_id: str, text: str
    ) -> list[WebhookDelivery]:
        from .models import WebhookDelivery

        with transaction.atomic(using=router.db_for_write(WebhookDelivery)):
            wanted = list(endpoint_ids)
            taken = set(
                WebhookDelivery.objects.filter(
                    endpoint_id__in=wanted, msg_id=msg_id
                ).values_list("endpoint_id", flat=True)
            )
            created = WebhookDelivery.objects.bulk_create(
                WebhookDelivery(
                    endpoint_id=endpoint_id,
                    webhook=self.name,
                    topic=topic,
                    msg_id=msg_id,
                    body=text,
                )
                for endpoint_id in wanted
                if endpoint_id not in taken
            )
            if not created:
                return []
            answers = self.job.enqueue_many(
                [{"delivery_id": row.pk, "replay": 0} for row in created]
            )
            for row, answer in zip(created, answers, strict=True):
                row.job_id = answer.id
            WebhookDelivery.objects.bulk_update(created, ["job_id"])
        return created

    def replay(self, delivery: WebhookDelivery) -> WebhookDelivery:
        """Send a delivery again (same ``webhook-id``, body and endpoint), as a new job."""
        from .models import WebhookDelivery

        with transaction.atomic(using=router.db_for_write(WebhookDelivery)):
            row = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
            row.replays += 1
            row.state = WebhookDelivery.State.PENDING
            answer = self.job.enqueue(delivery_id=row.pk, replay=row.replays)
            row.job_id = answer.id
            row.save(update_fields=["replays", "state", "job_id"])
        return row


def _networks(name: str, given: Any) -> tuple[IPNetwork, ...]:
    """``allow_networks`` as networks (what ``WEBHOOK_ALLOW_NETWORKS`` takes)."""
    try:
        return parse_networks(given)
    except NetworksInvalid as refused:
        if refused.index is None:
            cause = (
                'allow_networks is a list of networks such as ["10.0.0.0/8"], '
                f"not {type(given).__name__}"
            )
        else:
            cause = (
                f"allow_networks[{refused.index}] is not a network, got "
                f"{refused.entry!r:.80}"
            )
        raise WebhookDeclarationInvalid(
            f"webhook {name!r}: {cause}", fix=NETWORKS_FIX
        ) from None


def declared_allow_networks() -> tuple[IPNetwork, ...]:
    """Every network a declared webhook may reach beyond the setting's."""
    return tuple(
        network
        for handle in _HANDLES.values()
        for network in (handle.sender.allow_networks or ())
    )


def _endpoint_ids(endpoints: Any) -> list[int]:
    from .models import WebhookEndpoint

    if isinstance(endpoints, str | bytes) or not isinstance(endpoints, Iterable):
        raise WebhookEventInvalid(
            "deliver(): endpoints is a list of endpoints or their ids, not "
            f"{type(endpoints).__name__}",
            meta={"field": "endpoints"},
        )
    ids = []
    for entry in endpoints:
        pk = entry.pk if isinstance(entry, WebhookEndpoint) else entry
        if isinstance(pk, bool) or not isinstance(pk, int):
            raise WebhookEventInvalid(
                "deliver(): endpoints holds something that is not a saved "
                f"endpoint or its id: {entry!r:.80}",
                meta={"field": "endpoints"},
            )
        ids.append(pk)
    return ids


def _check_field(value: Any, what: str) -> None:
    problem = canonical_problem(value, what)
    if problem is not None:
        raise WebhookEventInvalid(f"deliver(): {problem}", meta={"field": what})


def _body_text(body: Any) -> str:
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise WebhookEventInvalid("deliver(): a bytes body must be UTF-8") from None
    elif isinstance(body, str):
        text = body
    else:
        try:
            text = json.dumps(body, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as error:
            raise WebhookEventInvalid(
                f"deliver(): the body is not JSON-safe ({type(error).__name__})"
            ) from None
    if "\x00" in text or len(text.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise WebhookEventInvalid(
            f"deliver(): the body is over {MAX_BODY_BYTES} bytes or holds a NUL"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise WebhookEventInvalid(
            "deliver(): the body holds a lone surrogate"
        ) from None
    return text


def webhook(
    *,
    name: str,
    queue: str = DEFAULT_QUEUE,
    retry: Retry | None = None,
    disable_after: int | None = None,
    timeout: DurationInput | None = None,
    connect_timeout: DurationInput | None = None,
    priority: int = 0,
    resolve: Resolver | None = None,
    allow_networks: Sequence[IPNetwork | str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> WebhookHandle:
    """Declare a webhook: a job that sends one delivery to one endpoint.

    Args:
        name: the job's durable name.
        queue: the queue its jobs go to.
        retry: the retry policy (default :data:`DEFAULT_RETRY`, 12 attempts
            over about 5.7 hours); 429 and 5xx retry, honouring Retry-After.
        disable_after: consecutive failed attempts that disable an endpoint
            (default ``WEBHOOK_DISABLE_AFTER``, 10).
        timeout: the ceiling of one request (default ``WEBHOOK_TIMEOUT``).
        connect_timeout: the connect and TLS ceiling (default
            ``WEBHOOK_CONNECT_TIMEOUT``).
        resolve: ``(host, port) -> [address, ...]`` (default: the system's
            resolver); every answer is screened.
        allow_networks: non-public networks it may reach, as strings
            (``"10.0.0.0/8"``, host bits zero) or :mod:`ipaddress` networks
            (default ``WEBHOOK_ALLOW_NETWORKS``).
        ssl_context: the TLS context (default: the system's trust store).

    Raises:
        WebhookDeclarationInvalid: a bad argument.
        JobDeclarationInvalid, JobDuplicate: as :func:`job`.
    """
    if disable_after is not None and (
        isinstance(disable_after, bool)
        or not isinstance(disable_after, int)
        or disable_after < 1
    ):
        raise WebhookDeclarationInvalid(
            f"webhook {name!r}: disable_after must be a whole number >= 1"
        )
    if resolve is not None and not callable(resolve):
        raise WebhookDeclarationInvalid(f"webhook {name!r}: resolve must be callable")
    networks = None if allow_networks is None else _networks(name, allow_networks)
    try:
        timeout_ms = (
            None if timeout is None else parse_duration_ms(timeout, what="timeout")
        )
        connect_ms = (
            None
            if connect_timeout is None
            else parse_duration_ms(connect_timeout, what="connect_timeout")
        )
    except DurationInvalid as error:
        raise WebhookDeclarationInvalid(f"webhook {name!r}: {error.cause}") from None
    sender = Sender(
        name=name,
        resolve=resolve or system_resolver,
        disable_after=disable_after,
        allow_networks=networks,
        timeout_ms=timeout_ms,
        connect_timeout_ms=connect_ms,
        ssl_context=ssl_context,
    )
    handle = WebhookHandle(name, sender)

    def send(ctx: Any, *, delivery_id: int, replay: int = 0) -> dict[str, Any]:
        return sender.send(ctx, delivery_id)

    send.__doc__ = f"Send one delivery of the {name} webhook."
    handle.job = job(
        send,
        name=name,
        queue=queue,
        retry=retry or DEFAULT_RETRY,
        priority=priority,
        idempotency_key=lambda given: (
            f"{given['delivery_id']}:{given.get('replay', 0)}"
        ),
    )
    _HANDLES[name] = handle
    return handle


def registered_webhooks() -> list[WebhookHandle]:
    """Every ``webhook(...)`` declared in this process."""
    return list(_HANDLES.values())


def _handle(name: str | WebhookHandle | None) -> WebhookHandle:
    if isinstance(name, WebhookHandle):
        return name
    key = name or DEFAULT_WEBHOOK
    handle = _HANDLES.get(key)
    if handle is None:
        raise WebhookDeclarationInvalid(
            f"no webhook(name={key!r}) is declared in this process",
            meta={"webhook": key},
        )
    return handle


def deliver(
    topic: str,
    body: Any,
    *,
    id: str | None = None,
    endpoints: Iterable[WebhookEndpoint | int] | None = None,
    webhook: str | WebhookHandle | None = None,
) -> list[WebhookDelivery]:
    """:meth:`WebhookHandle.deliver` of ``webhook`` (default: the built-in one)."""
    return _handle(webhook).deliver(topic, body, id=id, endpoints=endpoints)


def replay(delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again through the declaration that sent it.

    Raises:
        WebhookDeclarationInvalid: that declaration is gone from the code.
    """
    return _handle(delivery.webhook).replay(delivery)


def send_test(endpoint: WebhookEndpoint) -> WebhookDelivery:
    """Enqueue a ``webhook.test`` event to one endpoint, whatever its topics.

    Raises:
        WebhookEventInvalid: the endpoint is disabled (enable it first).
    """
    if endpoint.disabled_at is not None:
        raise WebhookEventInvalid(
            f"endpoint {endpoint.pk} is disabled; enable it to send a test event",
            fix="enable the endpoint, then send the test event again",
        )
    handle = _handle(None)
    body = {
        "type": TEST_TOPIC,
        "timestamp": timezone.now().isoformat(),
        "data": {"endpoint_id": endpoint.pk},
    }
    text = _body_text(body)
    (row,) = handle._write([endpoint.pk], TEST_TOPIC, f"msg_{uuid.uuid4().hex}", text)
    return row
