"""The spans, on the OpenTelemetry API: the one module that imports it.

Imported by :mod:`django_ultimate_jobs.tracing` only once tracing is on.
Names and attributes follow the OpenTelemetry messaging conventions
(``messaging.operation.type`` of the current ones: ``create``, ``send``,
``process``); what is this system's own goes under ``messaging.django_ultimate_jobs.``,
as they ask. The trace structure:

- an enqueue opens a PRODUCER span (``enqueue <queue>``; ``stage <queue>``
  through the outbox, ``fire <queue>`` for a cron occurrence) and stores its
  W3C ``traceparent`` on each row it writes: the message's creation context.
  A request that already carries one keeps it.
- each attempt runs in a CONSUMER span (``process <queue>``) linked to the
  creation context. The first delivery of an enqueued job is also its
  child, so a request, its enqueue and the run read as one trace; a retry,
  a re-taken lease, a resumed sleep and a cron-made job start a trace of
  their own instead (a link, not a parent), as the conventions advise for a
  consumer whose work is not a continuation of the producer's.
- each durable step is an INTERNAL span (``step <name>``) under its attempt;
  the outbox relay's publish a CLIENT span linked to every message's
  creation context; a webhook POST a CLIENT span with the HTTP attributes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from importlib import metadata
from typing import Any, Generic, Self

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from ..errors import code_of
from .shapes import Claimed, Request, RequestT, Sent

__all__ = [
    "CRON_ACTOR_PREFIX",
    "PREFIX",
    "SYSTEM",
    "Attempt",
    "HttpRequest",
    "Producing",
    "Relaying",
    "Step",
    "attempt",
    "creation_context",
    "producing",
    "relaying",
    "step",
    "traceparent_of",
    "use_provider",
    "webhook_post",
]

SYSTEM = "django_ultimate_jobs"
"""``messaging.system``: no well-known value fits, so the package's name."""
PREFIX = f"messaging.{SYSTEM}."
"""This system's own attributes (``messaging.{system}.*``, as the conventions ask)."""
_JOB_NAME = PREFIX + "job.name"
_JOB_RUN_ID = PREFIX + "job.run_id"
_JOB_ATTEMPT = PREFIX + "job.attempt"
_JOB_MAX_ATTEMPTS = PREFIX + "job.max_attempts"
_JOB_OUTCOME = PREFIX + "job.outcome"
_JOB_STATE = PREFIX + "job.state"
CRON_ACTOR_PREFIX = "task:"
"""The ``enqueued_by`` of the jobs a cron task made (``TaskHandle.actor``)."""
FAILED_OUTCOMES = frozenset(
    {"retried", "dead-lettered", "dropped", "lost", "refused", "timed-out", "abandoned"}
)
"""Attempt outcomes whose span ends with status ERROR."""
_ABANDONED = {
    "X_JOB_TIMEOUT": "timed-out",
    "X_DRAINING": "interrupted",
    "X_JOB_LEASE_LOST": "lost",
}
"""The outcome of a body whose attempt was settled without it, by the reason."""

_TRACEPARENT = re.compile(
    r"[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$"
)
"""A W3C ``traceparent`` as the SDK's propagator matches it: version, trace
id, parent id, flags, what a later version adds."""
_TRACEPARENT_MAX = 512
_PROCESS_ATTRIBUTES = {
    "messaging.system": SYSTEM,
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
}
_provider: Any = None
_tracer: Tracer | None = None


def use_provider(provider: Any) -> None:
    """Make spans with ``provider`` (``None``: the global one)."""
    global _provider, _tracer
    _provider, _tracer = provider, None


def _get_tracer() -> Tracer:
    global _tracer
    if _tracer is None:
        try:
            version = metadata.version("django-ultimate-jobs")
        except metadata.PackageNotFoundError:
            version = None
        # Without a provider of our own: the global one, through the API's
        # proxy, so one configured later still receives the spans.
        _tracer = trace.get_tracer(SYSTEM, version, tracer_provider=_provider)
    return _tracer


def traceparent_of(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span``; ``None`` for an invalid context.

    A no-op tracer's span has an all-zero context, which collectors reject:
    nothing is stored then.
    """
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


def creation_context(traceparent: str | None) -> SpanContext | None:
    """The span context a stored ``traceparent`` names (``None``: none, or invalid).

    Read as the W3C propagator reads the header (at most 512 characters,
    version ``ff`` refused, version ``00`` exactly four fields, later
    versions may add fields; an all-zero id is invalid), without its detour
    through a context: this runs once per attempt.
    """
    if not traceparent or len(traceparent) > _TRACEPARENT_MAX:
        return None
    match = _TRACEPARENT.match(traceparent)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    context = SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16)),
    )
    return context if context.is_valid else None


def _failed(span: Span, error: BaseException | None, code: str | None = None) -> None:
    if not span.is_recording():
        return
    if code is None and error is not None:
        code = code_of(error) or _type_name(error)
    span.set_attribute("error.type", code or "_OTHER")
    if error is not None:
        span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, code))


def _type_name(error: BaseException) -> str:
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


def _base(operation_type: str, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation_type,
        "messaging.operation.name": operation,
    }


def _destination(
    attributes: dict[str, Any], operation: str, requests: Sequence[Request]
) -> str:
    """Add the queue and job name when all requests share one; answer the span name."""
    queues = {r.queue for r in requests}
    names = {r.name for r in requests}
    if len(names) == 1:
        attributes[PREFIX + "job.name"] = next(iter(names))
    if len(requests) != 1:
        attributes["messaging.batch.message_count"] = len(requests)
    if len(queues) != 1:
        return operation
    queue = next(iter(queues))
    attributes["messaging.destination.name"] = queue
    return f"{operation} {queue}"


class _Open:
    """An open span, current until the ``with`` block ends; the code it wraps
    records how that went. What ``failures`` the block raises sets the
    span's status (the error's code as ``error.type``) and goes on.

    A class, not a generator: a span per attempt and per step is the hot
    path once tracing is on, and each generator layer costs.
    """

    __slots__ = ("_token", "span")
    failures: type[BaseException] = BaseException

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> Self:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        try:
            if error is not None and isinstance(error, self.failures):
                _failed(self.span, error)
        finally:
            otel_context.detach(self._token)
            self.span.end()


def _start(
    name: str,
    kind: SpanKind,
    attributes: dict[str, Any],
    links: Sequence[Link] | None = None,
    context: otel_context.Context | None = None,
) -> Span:
    return _get_tracer().start_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    )


# -- producer ---------------------------------------------------------------------


class Producing(_Open, Generic[RequestT]):
    """An open producer span: the requests to write, stamped with its context."""

    __slots__ = ("requests",)

    def __init__(self, requests: Sequence[RequestT], span: Span) -> None:
        super().__init__(span)
        self.requests = requests

    def sent(self, answers: Sequence[Sent]) -> None:
        """Record what the write answered (the job id of a single enqueue)."""
        if len(answers) == 1 and self.span.is_recording():
            self.span.set_attribute("messaging.message.id", str(answers[0].id))
            self.span.set_attribute(PREFIX + "job.deduped", answers[0].deduped)


def producing(
    requests: Sequence[RequestT], operation: str, *, task: str | None = None
) -> Producing[RequestT]:
    """A PRODUCER span (child of the current one) around writing ``requests``.

    ``operation`` is ``enqueue`` (the row is written now), ``stage`` (an
    outbox message: its publish comes later, in the relay's span) or
    ``fire`` (a cron occurrence of ``task``). The requests it hands back
    carry the span's ``traceparent``.
    """
    attributes = _base("create" if operation == "stage" else "send", operation)
    name = _destination(attributes, operation, requests)
    if task is not None:
        attributes[PREFIX + "cron.task"] = task
    span = _start(name, SpanKind.PRODUCER, attributes)
    traceparent = traceparent_of(span)
    if traceparent is not None:
        # A caller's own creation context is kept, as the conventions ask.
        requests = [
            r if r.traceparent else dataclasses.replace(r, traceparent=traceparent)  # type: ignore[type-var]
            for r in requests
        ]
    return Producing(requests, span)


# -- consumer ---------------------------------------------------------------------


class Attempt(_Open):
    """An attempt's open CONSUMER span."""

    __slots__ = ()

    def ended(
        self, outcome: str | None, state: str | None, error: BaseException | None
    ) -> None:
        """Record how the attempt ended (``outcome=None``: abandoned by its
        deadline or the drain, ``error`` the reason)."""
        span = self.span
        if not span.is_recording():
            return
        if outcome is None:
            code = code_of(error) if error is not None else None
            outcome = _ABANDONED.get(code or "", "abandoned")
        if state is None:
            span.set_attribute(_JOB_OUTCOME, outcome)
        else:  # one call: the span takes its lock once
            span.set_attributes({_JOB_OUTCOME: outcome, _JOB_STATE: state})
        if outcome in FAILED_OUTCOMES and error is not None:
            _failed(span, error)


def _first_delivery(claimed: Claimed) -> bool:
    return (
        claimed.attempt <= 1
        and claimed.claims <= 1
        and not (claimed.enqueued_by or "").startswith(CRON_ACTOR_PREFIX)
    )


def attempt(claimed: Claimed) -> Attempt:
    """The CONSUMER span of one attempt, current while its body runs.

    The executor says how it ended (:meth:`Attempt.ended`): a body's error
    never escapes it, only what stops the process does.
    """
    creation = creation_context(claimed.traceparent)
    if creation is not None and _first_delivery(claimed):
        parent = trace.set_span_in_context(NonRecordingSpan(creation))
    else:
        # A trace of its own, whatever span is current (run_jobs() in a test).
        parent = otel_context.Context()
    message_id = str(claimed.id)
    run_id = claimed.run_id
    attributes = {
        **_PROCESS_ATTRIBUTES,
        "messaging.destination.name": claimed.queue,
        "messaging.message.id": message_id,
        "messaging.client.id": claimed.claimed_by,
        _JOB_NAME: claimed.name,
        _JOB_RUN_ID: message_id if run_id == claimed.id else str(run_id),
        _JOB_ATTEMPT: claimed.attempt,
        _JOB_MAX_ATTEMPTS: claimed.max_attempts,
    }
    links = [Link(creation)] if creation is not None else None
    span = _start(
        f"process {claimed.queue}", SpanKind.CONSUMER, attributes, links, parent
    )
    return Attempt(span)


# -- steps ------------------------------------------------------------------------


class Step(_Open):
    """A step's open span."""

    __slots__ = ()
    failures = Exception
    """Only failures: a sleep or a wait inside a step suspends the job (a
    BaseException), which is not an error."""

    def replayed(self) -> None:
        """The step's output came from storage: its work did not run."""
        self.span.set_attribute(PREFIX + "step.replayed", True)


def step(name: str, run_id: Any) -> Step:
    """An INTERNAL span (child of the attempt's) around one durable step."""
    attributes = {
        PREFIX + "step.name": name,
        PREFIX + "job.run_id": str(run_id),
        PREFIX + "step.replayed": False,
    }
    return Step(_start(f"step {name}", SpanKind.INTERNAL, attributes))


# -- outbox relay -----------------------------------------------------------------


class Relaying(_Open):
    """The relay's open publish span."""

    __slots__ = ()

    def published(self, count: int, failure: BaseException | None) -> None:
        """Record how many messages became jobs, and the failure that stopped it."""
        if not self.span.is_recording():
            return
        self.span.set_attribute(PREFIX + "outbox.published", count)
        if failure is not None:
            _failed(self.span, failure)


def relaying(requests: Sequence[Request]) -> Relaying:
    """A CLIENT span around publishing staged messages, linked to their creation."""
    attributes = _base("send", "publish")
    name = _destination(attributes, "publish", requests)
    links = []
    for request in requests:
        creation = creation_context(request.traceparent)
        if creation is not None:
            links.append(Link(creation))
    return Relaying(_start(name, SpanKind.CLIENT, attributes, links))


# -- webhooks ---------------------------------------------------------------------


class HttpRequest(_Open):
    """A webhook POST's open span."""

    __slots__ = ()

    def answered(self, status: int | None, error: BaseException | None) -> None:
        """Record the response status (``None``: no answer) and the failure."""
        if not self.span.is_recording():
            return
        if status is not None:
            self.span.set_attribute("http.response.status_code", status)
        if error is not None:
            # The HTTP conventions: the status code is the error type when
            # there was an answer.
            _failed(self.span, error, str(status) if status else None)


def webhook_post(
    *, url: str, host: str, port: int, delivery_id: int, endpoint_id: Any
) -> HttpRequest:
    """A CLIENT span (HTTP conventions) around one webhook delivery's POST.

    ``url`` is the display form (no credentials, no query).
    """
    attributes = {
        "http.request.method": "POST",
        "server.address": host,
        "server.port": port,
        "url.full": url,
        PREFIX + "webhook.delivery_id": delivery_id,
        PREFIX + "webhook.endpoint_id": str(endpoint_id),
    }
    return HttpRequest(_start("POST", SpanKind.CLIENT, attributes))
