"""The dead-letter page: dead jobs grouped by job name and error code.

Each group gets a "Retry" button (``retry_job``, confirmed, logged) that
calls :func:`django_ultimate_jobs.operator.requeue_many` for that job name
and error code: up to 1,000 jobs a press, the page says how many remain.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.db.models import Count, F, Func, Max, TextField, Value
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from ..errors import JobsError
from ..models import Job
from .audit import confirmation, is_confirmed, log_operator_action, require
from .storage import tables_elsewhere

__all__ = ["view"]

_RECENT = 25


class _ErrorCode(Func):
    """``split_part(last_error, ':', 1)``: ``X_CODE`` of ``X_CODE: cause``.

    An error without a message has no colon: ``RuntimeError`` is its own
    group. The operator's ``error_code`` filter matches the same expression,
    so a group's retry moves exactly the group.
    """

    function = "split_part"
    output_field = TextField()


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """GET: the groups. POST ``name``: retry that job's dead letters."""
    require(request, "view_job")
    if request.method == "POST":
        return _retry_group(model_admin, request)
    elsewhere = tables_elsewhere(
        model_admin, request, "Dead letters", "python manage.py jobs ls --state dead"
    )
    if elsewhere is not None:
        return elsewhere
    dead = Job.objects.filter(state="dead")
    groups = (
        dead.annotate(code=_code())
        .values("name", "code")
        .annotate(count=Count("id"), latest=Max("updated_at"))
        .order_by("name", "-count")
    )
    recent = dead.defer("input", "last_error_stack", "history").order_by("-updated_at")
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Dead letters",
        "groups": list(groups),
        "recent": list(recent[:_RECENT]),
        "can_retry": request.user.has_perm("ultimate_jobs.retry_job"),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(
        request, "admin/django_ultimate_jobs/dead_letter.html", context
    )


def _retry_group(model_admin: Any, request: HttpRequest) -> HttpResponse:
    require(request, "retry_job")
    name = request.POST.get("name", "")
    # No code: the group of dead jobs without an error, or every dead job
    # of the name when retried from a link that names none.
    code = request.POST.get("code") or None
    group = f"{name} {code}" if code else name
    here = reverse("admin:ultimate_jobs_job_dead_letter")
    try:
        # Refuses text PostgreSQL cannot hold before any query meets it.
        operator.job_filter(state="dead", name=name, error_code=code)
    except JobsError as error:
        messages.error(request, error.render())
        return HttpResponseRedirect(here)
    if not is_confirmed(request):
        dead = Job.objects.filter(state="dead", name=name)
        if code:
            dead = dead.annotate(code=_code()).filter(code=code)
        return confirmation(
            request,
            {
                **model_admin.admin_site.each_context(request),
                "opts": model_admin.opts,
                "title": f"Retry the dead {group} jobs?",
                "verb_label": "Retry",
                "summary": f"{dead.count()} dead job(s); up to 1,000 move per press.",
                "fields": {"name": name, "code": code or ""},
                "cancel_url": here,
            },
        )
    try:
        moved = operator.requeue_many(state="dead", name=name, error_code=code)
    except JobsError as error:
        messages.error(request, error.render())
        return HttpResponseRedirect(here)
    log_operator_action(
        request,
        Job,
        [(name, f"dead {group} jobs")],
        flag=CHANGE,
        message=f"Retried {moved['affected']} dead {group} job(s) (admin)",
    )
    messages.success(
        request,
        f"{moved['affected']} dead {group} job(s) queued again; "
        f"{moved['remaining']} remaining.",
    )
    return HttpResponseRedirect(here)


def _code() -> _ErrorCode:
    return _ErrorCode(F("last_error"), Value(":"), Value(1))
