"""The workers page: the registry rows (host, pid, queues, in-flight jobs)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from .audit import require

__all__ = ["view"]


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Live workers, sorted by id (lapsed rows are dropped by the read)."""
    require(request, "view_job")
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Workers",
        "workers": operator.workers(),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(request, "admin/django_ultimate_jobs/workers.html", context)
