"""The events page: what was published on the event bus, read-only.

From :func:`django_ultimate_jobs.operator.events`: name, correlation key,
payload (redacted), published and expiry times, and the waits that took
each event, newest first. ``?name=`` narrows it to one event name; a name
no event can have is refused with its coded message, never a 500.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from ..errors import JobsError
from ..redaction import redacted_json
from .audit import require

__all__ = ["view"]

PAGE = 100


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """The newest :data:`PAGE` events, or those of ``?name=``."""
    require(request, "view_job")
    name = request.GET.get("name", "").strip() or None
    try:
        rows = operator.events(name=name, limit=PAGE)
        refusal = None
    except JobsError as error:
        rows, refusal = [], error.render()
    for row in rows:
        row["payload_json"] = redacted_json(row["payload"])
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Events",
        "events": rows,
        "name": name or "",
        "page": PAGE,
        "refusal": refusal,
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(request, "admin/django_ultimate_jobs/events.html", context)
