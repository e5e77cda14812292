"""The dead-letter page: dead jobs grouped by job name and error code.

Each group gets a "Retry" button (``retry_job``, confirmed, logged per job)
that calls :func:`django_ultimate_jobs.dead_letters.retry_group`: the
group's oldest 1,000 jobs a press, the page says how many remain. The
confirmation lists the jobs the press will move, read by the same query as
the retry, and pins their ids: the confirming POST moves those (each still
dead and in the group) and no job added since; a group with no name or code, or with no dead job left in it, is
refused with its coded error.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import dead_letters
from ..errors import JobsError
from ..models import Job
from .audit import confirmation, is_confirmed, log_operator_action, require
from .humane import counted
from .storage import tables_elsewhere

__all__ = ["view"]

_PINNED = "_selected_action"
_RECENT = 25
_REFUSALS_SHOWN = 10


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """GET: the groups. POST ``name`` and ``code``: retry that group."""
    require(request, "view_job")
    # Jobs not in this database's tables (the Redis driver): the page says
    # where they are instead of showing (or retrying) nothing.
    elsewhere = tables_elsewhere(
        model_admin, request, "Dead letters", "python manage.py jobs ls --state dead"
    )
    if elsewhere is not None:
        return elsewhere
    if request.method == "POST":
        return _retry_group(model_admin, request)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Dead letters",
        "groups": dead_letters.groups(),
        "recent": dead_letters.recent(_RECENT),
        "can_retry": request.user.has_perm("ultimate_jobs.retry_job"),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(
        request, "admin/django_ultimate_jobs/dead_letter.html", context
    )


def _retry_group(model_admin: Any, request: HttpRequest) -> HttpResponse:
    require(request, "retry_job")
    # Absent stays None: the group is refused, never widened to "any".
    name, code = request.POST.get("name"), request.POST.get("code")
    here = reverse("admin:ultimate_jobs_job_dead_letter")
    # The confirmation pins the jobs it listed; a confirming POST without
    # pinned ids is shown the confirmation, never widened to the group.
    pinned = request.POST.getlist(_PINNED)
    try:
        if not is_confirmed(request) or not pinned:
            return _confirm(model_admin, request, dead_letters.group(name, code))
        answer = dead_letters.retry_group(name, code, pinned)
    except JobsError as error:
        messages.error(request, error.render())
        return HttpResponseRedirect(here)
    assert name is not None and code is not None  # retry_group refused them
    label = dead_letters.group_label(name, code)
    moved = answer["moved"]
    # One entry per job moved, linked to its page; none when nothing moved.
    log_operator_action(
        request,
        Job,
        [(job_id, f"{name} {job_id}") for job_id in moved],
        flag=CHANGE,
        message=f"Retried from the dead-letter group {label} (admin)",
    )
    if moved:
        messages.success(
            request,
            f"{counted(len(moved), f'dead {label} job')} queued again; "
            f"{answer['remaining']} remaining.",
        )
    for job_id, refusal in answer["refused"][:_REFUSALS_SHOWN]:
        messages.error(request, f"Job {job_id}: {refusal}")
    if len(answer["refused"]) > _REFUSALS_SHOWN:
        more = len(answer["refused"]) - _REFUSALS_SHOWN
        messages.error(request, f"... and {more} more refusals.")
    return HttpResponseRedirect(here)


def _confirm(
    model_admin: Any, request: HttpRequest, group: dict[str, Any]
) -> HttpResponse:
    label = dead_letters.group_label(group["name"], group["code"])
    jobs = group["jobs"]
    shown = len(jobs)
    summary = f"{counted(group['count'], 'dead job')} in the group"
    summary += (
        "; all move on this press."
        if shown == group["count"]
        else f"; the oldest {shown} move on this press."
    )
    return confirmation(
        request,
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": f"Retry the dead {label} jobs?",
            "verb_label": "Retry",
            "summary": summary,
            "jobs": [(job["id"], f"{job['name']} {job['id']}") for job in jobs],
            "fields": {"name": group["name"], "code": group["code"]},
            "selected": [job["id"] for job in jobs],
            "cancel_url": reverse("admin:ultimate_jobs_job_dead_letter"),
        },
    )
