"""Pages that read the job tables, on a driver whose rows are not there.

The jobs list and the dead-letter groups query ``ultimate_jobs_job`` with
the ORM. A driver without ``features.orm_tables`` (the Redis driver) keeps
its rows elsewhere, so those pages say so, and point to the pages and
commands that read through the operator API, instead of showing an empty
table as if no job existed.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..drivers import get_driver

__all__ = ["tables_elsewhere"]


def tables_elsewhere(
    model_admin: Any, request: HttpRequest, title: str, command: str
) -> HttpResponse | None:
    """The explanation page when the driver's rows are not the models, else ``None``."""
    driver = get_driver()
    if driver.features.orm_tables:
        return None
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "driver": driver.name,
        "command": command,
    }
    return TemplateResponse(
        request, "admin/django_ultimate_jobs/tables_elsewhere.html", context
    )
