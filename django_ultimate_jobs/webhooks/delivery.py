"""One attempt at one delivery: screen, sign, POST, record, decide.

The order is upstream's (§27.3): a disabled endpoint or a bad URL stops the
attempt before any socket; the address screen runs on every attempt (a
name may resolve elsewhere tomorrow); the timestamp is the send time (a
retry days later is signed now); a failed attempt is recorded BEFORE its
error is raised, a delivered one by the worker's settle thread with other
deliveries, with the job's ack (``ctx.write_on_ack``); a failure caused by
this attempt's own cancellation (deadline, lost lease) is not recorded, since the delivery belongs to another attempt
now; a drain lets a POST already on the wire finish (otherwise every deploy
would POST again).
"""

from __future__ import annotations

import email.utils
import functools
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from .. import tracing
from ..conf import jobs_settings
from ..errors import Draining, JobsError
from .addresses import IPNetwork, Resolver, Target, display_url, parse_url, vet
from .endpoints import _allow_http, disable_endpoint, signing_secrets
from .errors import (
    WebhookDeliveryFailed,
    WebhookDeliveryRejected,
    WebhookDeliveryThrottled,
    WebhookEndpointDisabled,
    WebhookEndpointInvalid,
    WebhookEventUnknown,
)
from .rows import (
    MAX_LOGGED_ATTEMPTS,
    DeliveryRow,
    EndpointRow,
    Success,
    read_delivery,
    record_attempt,
    record_successes,
)
from .signing import signature_header
from .transport import PinnedClient, RequestFailed, Response

if TYPE_CHECKING:
    from ..context import JobContext

__all__ = ["MAX_LOGGED_ATTEMPTS", "Sender", "retry_after_seconds"]

logger = logging.getLogger("django_ultimate_jobs")

CONTENT_TYPE = "application/json"
GONE = 410
"""The status that disables an endpoint at once."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (digits or an HTTP date), or None."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit() and text.isascii():
        return float(min(int(text), 10**9))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now_s = time.time() if now is None else now
    return max(0.0, when.timestamp() - now_s)


@dataclass(frozen=True, slots=True)
class _Outcome:
    ok: bool
    status: int | None
    duration_ms: int
    error: JobsError | None


class Sender:
    """Sends deliveries for one ``webhook(...)`` declaration."""

    def __init__(
        self,
        *,
        name: str,
        resolve: Resolver,
        disable_after: int | None = None,
        allow_networks: Sequence[IPNetwork] | None = None,
        timeout_ms: int | None = None,
        connect_timeout_ms: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.resolve = resolve
        self._disable_after = disable_after
        self.allow_networks = allow_networks
        self._timeouts = (timeout_ms, connect_timeout_ms)
        self._ssl_context = ssl_context
        self._client: PinnedClient | None = None

    @property
    def disable_after(self) -> int:
        """Consecutive failures that disable an endpoint (declared, or the setting)."""
        if self._disable_after is not None:
            return self._disable_after
        return jobs_settings().webhook_disable_after

    def client(self) -> PinnedClient:
        """The HTTP client, built on first use (declared timeouts, or the settings')."""
        if self._client is None:
            settings = jobs_settings()
            timeout_ms, connect_ms = self._timeouts
            self._client = PinnedClient(
                connect_timeout_s=(connect_ms or settings.webhook_connect_timeout_ms)
                / 1000,
                timeout_s=(timeout_ms or settings.webhook_timeout_ms) / 1000,
                ssl_context=self._ssl_context,
            )
        return self._client

    def _allowed(self) -> Sequence[IPNetwork]:
        if self.allow_networks is not None:
            return self.allow_networks
        return jobs_settings().webhook_allow_networks

    # -- the attempt -----------------------------------------------------------

    def send(self, ctx: JobContext, delivery_id: int) -> dict[str, Any]:
        """The job body: one attempt at ``delivery_id``."""
        from .models import WebhookDelivery

        delivery = read_delivery(delivery_id)
        if delivery is None:
            raise WebhookEventUnknown(
                f"delivery {delivery_id} no longer exists",
                meta={"delivery_id": delivery_id},
            )
        if delivery.state == WebhookDelivery.State.DELIVERED:
            # A rerun after the success was recorded (the worker died
            # before settling): the receiver has it already.
            return {"delivery_id": delivery_id, "status": delivery.last_status}
        endpoint = delivery.endpoint
        try:
            if endpoint.disabled_at is not None:
                raise WebhookEndpointDisabled(
                    f"endpoint {endpoint.pk} is disabled",
                    meta={"endpoint_id": endpoint.pk},
                )
            target = _parsed(endpoint.url, _allow_http())
        except (WebhookEndpointDisabled, WebhookEndpointInvalid) as refusal:
            self._record(ctx, delivery, _Outcome(False, None, 0, refusal), count=False)
            raise
        if tracing.enabled():
            with tracing.webhook_post(
                url=display_url(endpoint.url),
                host=target.host,
                port=target.port,
                delivery_id=delivery_id,
                endpoint_id=endpoint.pk,
            ) as span:
                outcome = self._attempt(ctx, delivery, endpoint, target)
                span.answered(outcome.status, outcome.error)
        else:
            outcome = self._attempt(ctx, delivery, endpoint, target)
        if outcome.ok:
            # Recorded by the settle thread with other deliveries, with
            # this job's ack: the slot is free for the next POST.
            ctx.write_on_ack(record_successes, self._success(ctx, delivery, outcome))
            return {
                "delivery_id": delivery_id,
                "status": outcome.status,
                "duration_ms": outcome.duration_ms,
            }
        assert outcome.error is not None
        failures = self._record(ctx, delivery, outcome, count=True)
        if outcome.status == GONE:
            # 410 Gone: the receiver says the endpoint no longer exists (the
            # Standard Webhooks specification's advice: disable it).
            self._disable(endpoint, f"the endpoint answered {GONE} Gone")
        elif failures >= self.disable_after:
            self._disable(
                endpoint, f"disabled after {failures} consecutive failed deliveries"
            )
            WebhookDelivery.objects.filter(pk=delivery_id).update(
                state=WebhookDelivery.State.FAILED
            )
            raise WebhookEndpointDisabled(
                f"endpoint {endpoint.pk} failed {failures} times in a row and was "
                "disabled",
                meta={"endpoint_id": endpoint.pk, "failures": failures},
            ) from outcome.error
        raise outcome.error

    def _attempt(
        self,
        ctx: JobContext,
        delivery: DeliveryRow,
        endpoint: EndpointRow,
        target: Target,
    ) -> _Outcome:
        url = endpoint.url
        try:
            addresses = vet(
                target, resolve=self.resolve, allow=self._allowed(), url=url
            )
        except WebhookDeliveryFailed as error:  # DNS: transient
            return _Outcome(False, None, 0, error)
        except WebhookEndpointInvalid as error:
            return _Outcome(False, None, 0, error)
        body = delivery.body.encode("utf-8")
        stamp = int(time.time())
        headers = {
            **{str(k): str(v) for k, v in (endpoint.headers or {}).items()},
            "Content-Type": CONTENT_TYPE,
            "webhook-id": delivery.msg_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": signature_header(
                signing_secrets(endpoint, timezone.now()), delivery.msg_id, stamp, body
            ),
        }
        # The last moment to stop without the receiver hearing anything.
        ctx.cancellation.raise_if_cancelled()
        client = self.client()
        failure: RequestFailed | None = None
        for address in addresses:
            try:
                response = client.post(
                    target, address, headers, body, on_abort=self._abort_hook(ctx)
                )
            except RequestFailed as error:
                failure = error
                if error.kind == "connect":
                    continue  # the next address of the name, if any
                break
            return _judge(response, url)
        assert failure is not None
        reason = ctx.cancellation.reason
        if reason is not None and not isinstance(reason, Draining):
            # Our own deadline or a lost lease cut the request: another
            # attempt owns the delivery now, so nothing is recorded.
            raise reason
        return _Outcome(
            False,
            None,
            failure.duration_ms,
            WebhookDeliveryFailed(
                f"no answer from the endpoint ({failure.kind}): {failure.detail}",
                meta={"url": display_url(url), "kind": failure.kind},
            ),
        )

    @staticmethod
    def _abort_hook(ctx: JobContext) -> Any:
        def hook(abort: Any) -> None:
            def on_cancel(reason: JobsError) -> None:
                if not isinstance(reason, Draining):
                    abort()

            ctx.cancellation.on_cancel(on_cancel)

        return hook

    def _record(
        self,
        ctx: JobContext,
        delivery: DeliveryRow,
        outcome: _Outcome,
        *,
        count: bool,
    ) -> int:
        """Log a failed attempt on the delivery now (and on its endpoint's
        failure streak when ``count``); answer the endpoint's consecutive
        failures. (A success is written with the job's ack: :meth:`_success`.)"""
        assert outcome.error is not None
        now = timezone.now()
        error = outcome.error.render()[:1000]
        terminal = outcome.error.retry_class.value == "terminal" or ctx.final_attempt
        state = "failed" if terminal else "pending"
        entry = _entry(delivery, ctx, now, outcome, error)
        change = "failed" if count else None
        return record_attempt(
            delivery, entry, state=state, now=now, endpoint_change=change
        )

    @staticmethod
    def _success(ctx: JobContext, delivery: DeliveryRow, outcome: _Outcome) -> Success:
        """The record of a delivered attempt, for the settle thread."""
        now = timezone.now()
        return Success(
            delivery=delivery.pk,
            seen=delivery.attempts,
            entry=_entry(delivery, ctx, now, outcome, ""),
            at=now,
            endpoint=delivery.endpoint.pk,
            endpoint_change=not _streak_clear(delivery.endpoint, now),
        )

    def _disable(self, endpoint: EndpointRow, reason: str) -> None:
        if disable_endpoint(endpoint.pk, reason):
            logger.warning(
                "jobs.webhook.endpoint.disabled",
                extra={
                    "endpoint_id": endpoint.pk,
                    "url": display_url(endpoint.url),
                    "reason": reason,
                },
            )
            from .audit import log_disabled
            from .models import WebhookEndpoint

            model = WebhookEndpoint.objects.filter(pk=endpoint.pk).first()
            if model is not None:
                log_disabled(model, reason)


def _entry(
    delivery: DeliveryRow,
    ctx: JobContext,
    now: datetime,
    outcome: _Outcome,
    error: str,
) -> dict[str, Any]:
    """The attempt's line in the delivery's ``attempt_log``."""
    return {
        "attempt": delivery.attempts + 1,
        "job_attempt": ctx.attempt,
        "at": now.isoformat(),
        "status": outcome.status,
        "duration_ms": outcome.duration_ms,
        "error": error,
    }


@functools.lru_cache(maxsize=1024)
def _parsed(url: str, allow_http: bool) -> Target:
    """:func:`parse_url`, kept per URL: a Target is immutable and a function
    of the text alone (no resolving), so an endpoint's URL is parsed once
    per worker, not per attempt (a refused URL raises, and is not kept)."""
    return parse_url(url, allow_http=allow_http)


def _streak_clear(endpoint: EndpointRow, now: datetime) -> bool:
    """Whether a success would change nothing on the endpoint's row."""
    last = endpoint.last_success_at
    return (
        endpoint.consecutive_failures == 0
        and last is not None
        and now - last < timedelta(seconds=1)
    )


def _judge(response: Response, url: str) -> _Outcome:
    """2xx ok; 429 and 5xx retried (after Retry-After when given); anything
    else (a redirect, another 4xx) is final."""
    status = response.status
    if 200 <= status < 300:
        return _Outcome(True, status, response.duration_ms, None)
    meta: dict[str, Any] = {"url": display_url(url), "status": status}
    if status == 429 or 500 <= status < 600:
        wait = retry_after_seconds(response.retry_after)
        if wait is not None:
            error: JobsError = WebhookDeliveryThrottled(
                f"the endpoint answered {status} with Retry-After {wait:g}s",
                meta={**meta, "retry_after_seconds": wait},
            )
        else:
            error = WebhookDeliveryFailed(f"the endpoint answered {status}", meta=meta)
    else:
        kind = "a redirect (never followed)" if 300 <= status < 400 else str(status)
        error = WebhookDeliveryRejected(f"the endpoint answered {kind}", meta=meta)
    return _Outcome(False, status, response.duration_ms, error)
