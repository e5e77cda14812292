"""OpenTelemetry traces: enqueue, attempt, step, outbox publish, webhook POST.

Nothing here imports OpenTelemetry until tracing is on, and a call site pays
one flag test while it is off::

    if tracing.enabled():
        with tracing.producing(requests, "enqueue") as producing:
            ...

Whether tracing is on is decided once, at first use (and again when a test
changes ``ULTIMATE_JOBS``), from ``ULTIMATE_JOBS["TRACING"]``:

- ``"auto"`` (the default): on when the process configured a tracer
  provider before it (``opentelemetry.trace`` is imported and its global
  provider is not the API's placeholder). A process that never touched
  OpenTelemetry, or lacks the ``otel`` extra, imports nothing.
- ``True``: on (the extra is required): spans go to whatever global provider
  is set, now or later.
- ``False``: off.

The spans themselves are in :mod:`.spans` (the one module that imports
``opentelemetry``); see docs/howto/monitoring.md for their names and
attributes. This package sits in the bottom layer beside the settings, so
the enqueue path, the worker, the outbox and the webhook sender may all use
it: it knows their objects only by the fields it reads (:mod:`.shapes`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..conf import jobs_settings

if TYPE_CHECKING:
    from .shapes import Claimed, Request, RequestT
    from .spans import Attempt, HttpRequest, Producing, Relaying, Step

__all__ = [
    "attempt",
    "connect_setting_changed",
    "enabled",
    "producing",
    "relaying",
    "reset",
    "step",
    "webhook_post",
]

_decided = False
_on = False
_pinned = False


def enabled() -> bool:
    """Whether spans are made (decided at first call, then a flag read)."""
    if _decided:
        return _on
    return _decide()


def reset(tracer_provider: Any = None) -> None:
    """Decide again at the next use; with ``tracer_provider``, use it, on.

    For tests: a provider given here receives this package's spans instead
    of the global one, until the next ``reset()``.
    """
    global _decided, _on, _pinned
    if (
        tracer_provider is not None
        or "django_ultimate_jobs.tracing.spans" in sys.modules
    ):
        from . import spans

        spans.use_provider(tracer_provider)
    _pinned = tracer_provider is not None
    _decided, _on = _pinned, _pinned


def connect_setting_changed() -> None:
    """Decide again when a test overrides ``ULTIMATE_JOBS`` (a pinned provider stays)."""
    from django.core.signals import setting_changed

    setting_changed.connect(_settings_changed, dispatch_uid="ultimate_jobs_tracing")


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    global _decided
    if setting == "ULTIMATE_JOBS" and not _pinned:
        _decided = False


def _decide() -> bool:
    global _decided, _on
    choice = jobs_settings().tracing
    if choice == "auto":
        on = _provider_configured()
    else:
        on = bool(choice)
    _decided, _on = True, on
    return on


def _provider_configured() -> bool:
    # A process that configured OpenTelemetry imported its API first; one
    # that did not must not import it here (the cost, and the promise of
    # the docs: nothing without a provider).
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return False
    provider = api.get_tracer_provider()
    placeholders = (api.ProxyTracerProvider, api.NoOpTracerProvider)
    return not isinstance(provider, placeholders)


# -- the spans (each imports .spans, and so OpenTelemetry, on first call) ------


def producing(
    requests: Sequence[RequestT], operation: str, *, task: str | None = None
) -> Producing[RequestT]:
    """A PRODUCER span around writing ``requests``; see :func:`.spans.producing`."""
    from .spans import producing as start

    return start(requests, operation, task=task)


def attempt(claimed: Claimed) -> Attempt:
    """The CONSUMER span of one attempt; see :func:`.spans.attempt`."""
    from .spans import attempt as start

    return start(claimed)


def step(name: str, run_id: Any) -> Step:
    """The INTERNAL span of one durable step; see :func:`.spans.step`."""
    from .spans import step as start

    return start(name, run_id)


def relaying(requests: Sequence[Request]) -> Relaying:
    """The CLIENT span of one outbox publish; see :func:`.spans.relaying`."""
    from .spans import relaying as start

    return start(requests)


def webhook_post(
    *, url: str, host: str, port: int, delivery_id: int, endpoint_id: Any
) -> HttpRequest:
    """The CLIENT span of one webhook POST; see :func:`.spans.webhook_post`."""
    from .spans import webhook_post as start

    return start(
        url=url, host=host, port=port, delivery_id=delivery_id, endpoint_id=endpoint_id
    )
