"""The cron tasks page: schedule, next run, last fire, pause, run now.

The listing is :func:`django_ultimate_jobs.operator.tasks`. Pause and
resume need ``ultimate_jobs.change_queuepause``, the queues page's
permission (a task pause is a ``QueuePause`` row of kind ``task``); "Run
now" enqueues the task's jobs through :func:`operator.run_task` and needs
``ultimate_jobs.promote_job``, the permission of the job page's "Run now".
Each verb is confirmed, checked again on the POST that acts, and logged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.admin.models import ADDITION
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from ..errors import JobsError
from ..models import Job
from .audit import confirmation, is_confirmed, log_operator_action, require
from .humane import counted
from .queues import PAUSE_PERMISSION, record_pause

__all__ = ["RUN_PERMISSION", "VERB_PERMISSIONS", "view"]

RUN_PERMISSION = "promote_job"
# Verb -> the permission its POST needs.
VERB_PERMISSIONS = {
    "pause": PAUSE_PERMISSION,
    "resume": PAUSE_PERMISSION,
    "run": RUN_PERMISSION,
}
_LABELS = {"pause": "Pause", "resume": "Resume", "run": "Run now"}
_TITLES = {
    "pause": "Pause cron task {task}?",
    "resume": "Resume cron task {task}?",
    "run": "Run cron task {task} now?",
}
_SUMMARIES = {
    "pause": (
        "The scheduler skips the task when it falls due; its watermark is "
        "left alone, so on resume its catch-up policy decides what it missed."
    ),
    "resume": (
        "The scheduler fires the task again from its next due occurrence; "
        "its catch-up policy decides what it missed while paused."
    ),
    "run": (
        "Enqueues the task's jobs now, off schedule. The schedule and the "
        "next run are left alone."
    ),
}
_INSTANTS = ("next_run", "last_occurrence", "fired_at", "paused_at")


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """GET: every cron task. POST ``task`` + ``verb``: pause, resume or run."""
    if request.method == "POST":
        return _operate(model_admin, request)
    require(request, "view_job")
    rows = [
        {
            **entry,
            **{
                key: datetime.fromisoformat(entry[key]) if entry[key] else None
                for key in _INSTANTS
            },
        }
        for entry in operator.tasks()
    ]
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Cron tasks",
        "rows": rows,
        "can_pause": request.user.has_perm(f"ultimate_jobs.{PAUSE_PERMISSION}"),
        "can_run": request.user.has_perm(f"ultimate_jobs.{RUN_PERMISSION}"),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(
        request, "admin/django_ultimate_jobs/cron_tasks.html", context
    )


def _operate(model_admin: Any, request: HttpRequest) -> HttpResponse:
    task, verb = request.POST.get("task", ""), request.POST.get("verb", "")
    here = reverse("admin:ultimate_jobs_job_cron_tasks")
    if verb not in VERB_PERMISSIONS:
        require(request, PAUSE_PERMISSION)
        messages.error(request, "choose pause, resume or run")
        return HttpResponseRedirect(here)
    require(request, VERB_PERMISSIONS[verb])
    try:
        # Refused at the first POST: no confirmation for a task it refuses.
        operator.checked_task(task)
    except JobsError as error:
        messages.error(request, error.render())
        return HttpResponseRedirect(here)
    if not is_confirmed(request):
        return confirmation(
            request,
            {
                **model_admin.admin_site.each_context(request),
                "opts": model_admin.opts,
                "title": _TITLES[verb].format(task=task),
                "verb_label": _LABELS[verb],
                "summary": _SUMMARIES[verb],
                "fields": {"task": task, "verb": verb},
                "cancel_url": here,
            },
        )
    try:
        if verb == "run":
            _run(request, task)
        else:
            _pause_or_resume(request, task, verb)
    except JobsError as error:
        messages.error(request, error.render())
    return HttpResponseRedirect(here)


def _pause_or_resume(request: HttpRequest, task: str, verb: str) -> None:
    if verb == "pause":
        operator.pause_task(task)
    else:
        operator.resume_task(task)
    record_pause(request, "cron task", task, verb)


def _run(request: HttpRequest, task: str) -> None:
    entries = operator.run_task(task)
    queued = [entry["id"] for entry in entries if not entry["deduped"]]
    # A deduped entry is a live job that already holds the key: nothing
    # was written for it, so nothing is logged.
    log_operator_action(
        request,
        Job,
        [(job_id, f"{task} run now") for job_id in queued],
        flag=ADDITION,
        message=f"Enqueued by cron task {task}, run now (admin)",
    )
    deduped = len(entries) - len(queued)
    note = f"; {deduped} already queued (same idempotency key)" if deduped else ""
    messages.success(
        request, f"Cron task {task}: {counted(len(queued), 'job')} queued{note}."
    )
