"""The dashboard: jobs per state now, and outcomes over the last hour and day.

Depth comes from ``operator.stats`` (partial indexes only); throughput and
failures from the job counters the settling statements write, so the page
reads a few thousand counter rows at most, never the job table's history.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from .audit import require

__all__ = ["view"]

_WINDOWS = (("last hour", timedelta(hours=1)), ("last 24 hours", timedelta(days=1)))
_OUTCOMES = ("done", "retried", "failed", "dead")


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Counts per state, and per-window outcome totals per job name."""
    require(request, "view_job")
    windows = []
    for label, window in _WINDOWS:
        rows = operator.counters(window=window)
        totals = {name: sum(row[name] for row in rows) for name in _OUTCOMES}
        windows.append({"label": label, "rows": rows, "totals": totals})
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Jobs dashboard",
        "stats": operator.stats(),
        "windows": windows,
        "workers": len(operator.workers()),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(
        request, "admin/django_ultimate_jobs/dashboard.html", context
    )
