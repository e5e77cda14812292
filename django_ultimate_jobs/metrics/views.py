"""The metrics view: the fleet's queue gauges for a scraped web process.

Add it to your URLs (docs/howto/monitoring.md)::

    from django_ultimate_jobs.metrics.views import metrics

    urlpatterns = [..., path("metrics/jobs", metrics)]

It answers what ``runjobs --metrics-port`` answers for the fleet (queue
depths, the oldest ready job, dead jobs, live workers, from the shared
snapshot: one read of the queues per ``METRICS_INTERVAL`` for the whole
fleet), not a worker process's own counters: a web process runs no jobs.

Who may read it: a request with ``Authorization: Bearer <METRICS_TOKEN>``
(when the setting is set), or an active staff user with the
``ultimate_jobs.view_job`` permission (a browser session). Anyone else gets
401 (no credentials) or 403. Queue names are not secrets, but depths and
worker counts are operational data, so the view is never public.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from ..conf import jobs_settings
from .errors import require_client

__all__ = ["metrics"]

_CHALLENGE = 'Bearer realm="ultimate-jobs-metrics"'


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Serve the fleet's queue gauges in Prometheus' text format (see the module)."""
    denied = _denied(request)
    if denied is not None:
        return denied
    require_client()
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.registry import CollectorRegistry

    from .collect import FleetCollector

    registry = CollectorRegistry()
    registry.register(FleetCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _denied(request: HttpRequest) -> HttpResponse | None:
    header = request.headers.get("Authorization", "")
    token = jobs_settings().metrics_token
    if header:
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or token is None:
            return _refuse(401)
        if hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        return _refuse(403)
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return _refuse(401)
    if user.is_active and user.is_staff and user.has_perm("ultimate_jobs.view_job"):
        return None
    return _refuse(403)


def _refuse(status: int) -> HttpResponse:
    response = HttpResponse(
        "401 Unauthorized\n" if status == 401 else "403 Forbidden\n",
        status=status,
        content_type="text/plain; charset=utf-8",
    )
    if status == 401:
        response["WWW-Authenticate"] = _CHALLENGE
    return response
