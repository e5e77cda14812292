"""The leases page: locks and concurrency slots, who holds them, until when.

Read-only, from :func:`django_ultimate_jobs.operator.leases` (the same rows
``manage.py jobs leases`` prints): key, slot, holder, fencing token, expiry,
and whether the row lapsed (a lapsed row stays until its slot is taken).
``?prefix=lock:`` narrows it to one kind or one key family.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from ..errors import JobsError
from .audit import require

__all__ = ["view"]


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Stored lease rows under ``?prefix=`` (200 at most), by key and slot."""
    require(request, "view_job")
    prefix = request.GET.get("prefix", "")
    try:
        rows = operator.leases(prefix=prefix)
        refusal = None
    except JobsError as error:
        rows, refusal = [], f"{error.cause} ({error.fix})"
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Leases",
        "leases": rows,
        "prefix": prefix,
        "refusal": refusal,
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(request, "admin/django_ultimate_jobs/leases.html", context)
