"""The dashboard: jobs per state now, outcomes over time, and their totals.

Depth comes from ``operator.stats`` (partial indexes only); throughput,
failures and pickup latency from the job counters the settling statements
write (``timeseries.series`` bins them), so the page reads a few thousand
counter rows at most, never the job table's history. The charts are inline
SVG drawn here (``charts``): no script, no CDN.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator, timeseries
from ..timeseries import SPANS, Series, Slot
from .audit import require
from .charts import Chart, chart, duration_text
from .humane import counted

__all__ = ["view"]

_WINDOWS = (("last hour", timedelta(hours=1)), ("last 24 hours", timedelta(days=1)))
_OUTCOMES = ("done", "retried", "failed", "dead")
_CHARTED = (
    ("done", "Done", "done"),
    ("failed", "Failed", "failed"),
    ("dead", "Dead", "dead"),
)


def _chosen(request: HttpRequest, name: str) -> str | None:
    return request.GET.get(name) or None


def _outcome_chart(series: Series, key: str, title: str, words: str) -> Chart:
    total = getattr(series.total, key)
    return chart(
        series,
        key,
        title=title,
        value=lambda slot: getattr(slot, key),
        describe=lambda _slot, count: f"{count} {words}",
        summary=f"{total} {words} in the {series.span.label}.",
        empty=f"Nothing {words} in the {series.span.label}",
    )


def _pickup_chart(series: Series) -> Chart:
    def describe(slot: Slot, mean: int) -> str:
        return (
            f"mean pickup {duration_text(mean)} over {counted(slot.pickups, 'attempt')}"
        )

    mean = series.total.mean_pickup_ms
    summary = (
        f"No attempt settled in the {series.span.label}."
        if mean is None
        else f"Mean pickup latency {duration_text(mean)} over "
        f"{counted(series.total.pickups, 'attempt')} in the {series.span.label}."
    )
    return chart(
        series,
        "pickup",
        title="Mean pickup latency",
        value=lambda slot: slot.mean_pickup_ms,
        describe=describe,
        summary=summary,
        axis=duration_text,
        empty=f"No pickup latency above 0 ms in the {series.span.label}",
    )


def _charts(request: HttpRequest) -> dict[str, Any]:
    span = request.GET.get("span", "hour")
    if span not in SPANS:
        span = "hour"
    queue, job = _chosen(request, "queue"), _chosen(request, "job")
    series = timeseries.series(span, queue=queue, job=job)
    charts = [_outcome_chart(series, *spec) for spec in _CHARTED]
    charts.append(_pickup_chart(series))
    return {
        "series": series,
        "charts": charts,
        "spans": SPANS.values(),
        # A chosen name nothing settled under stays offered (and selected).
        "queues": sorted({*series.queues, *([queue] if queue else [])}),
        "jobs": sorted({*series.jobs, *([job] if job else [])}),
        "rows": [slot for slot in series.slots if slot.settled],
    }


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Counts per state, outcome charts, and per-window totals per job name."""
    require(request, "view_job")
    windows = []
    for label, window in _WINDOWS:
        rows = operator.counters(window=window)
        totals = {name: sum(row[name] for row in rows) for name in _OUTCOMES}
        windows.append({"label": label, "rows": rows, "totals": totals})
    stats = operator.stats()
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Jobs dashboard",
        "stats": stats,
        "windows": windows,
        "workers": len(operator.workers()),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
        **_charts(request),
    }
    return TemplateResponse(
        request, "admin/django_ultimate_jobs/dashboard.html", context
    )
