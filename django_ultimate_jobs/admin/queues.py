"""The queues page: depth per state, the oldest ready age, pause and resume.

Pausing needs ``ultimate_jobs.change_queuepause`` (a pause is a
``QueuePause`` row); each pause and resume is confirmed and logged.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.models import ADDITION, DELETION
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import operator
from ..conf import jobs_settings
from ..errors import JobsError
from ..models import QueuePause
from .audit import confirmation, is_confirmed, log_operator_action, require

__all__ = ["PAUSE_PERMISSION", "record_pause", "view"]

PAUSE_PERMISSION = "change_queuepause"


def view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """GET: every queue's depth. POST ``queue`` + ``verb``: pause or resume."""
    if request.method == "POST":
        return _pause_or_resume(model_admin, request)
    require(request, "view_job")
    stats = operator.stats()
    paused = {p["name"]: p["paused_at"] for p in stats["paused"]}
    by_name = {q["queue"]: q for q in stats["queues"]}
    # The queues every worker serves are listed even while empty.
    served = {*jobs_settings().queues, jobs_settings().housekeeping_queue}
    names = sorted(set(by_name) | served | set(paused))
    rows = [
        {
            "name": name,
            "paused_at": paused.get(name),
            **by_name.get(name, {"queue": name}),
        }
        for name in names
    ]
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Queues",
        "rows": rows,
        "totals": stats["totals"],
        "can_pause": request.user.has_perm(f"ultimate_jobs.{PAUSE_PERMISSION}"),
        "list_url": reverse("admin:ultimate_jobs_job_changelist"),
    }
    return TemplateResponse(request, "admin/django_ultimate_jobs/queues.html", context)


def _pause_or_resume(model_admin: Any, request: HttpRequest) -> HttpResponse:
    require(request, PAUSE_PERMISSION)
    queue, verb = request.POST.get("queue", ""), request.POST.get("verb")
    here = reverse("admin:ultimate_jobs_job_queues")
    if verb not in ("pause", "resume"):
        messages.error(request, "choose pause or resume")
        return HttpResponseRedirect(here)
    try:
        # Refused at the first POST: no confirmation for a name it refuses.
        operator.checked_queue(queue)
    except JobsError as error:
        messages.error(request, error.render())
        return HttpResponseRedirect(here)
    if not is_confirmed(request):
        return confirmation(
            request,
            {
                **model_admin.admin_site.each_context(request),
                "opts": model_admin.opts,
                "title": f"{verb.capitalize()} queue {queue}?",
                "verb_label": verb.capitalize(),
                "summary": (
                    "Workers stop claiming from a paused queue at their next "
                    "claim; running jobs finish."
                    if verb == "pause"
                    else "Workers claim from the queue again at once."
                ),
                "fields": {"queue": queue, "verb": verb},
                "cancel_url": here,
            },
        )
    try:
        if verb == "pause":
            operator.pause_queue(queue)
        else:
            operator.resume_queue(queue)
    except JobsError as error:
        messages.error(request, error.render())
        return HttpResponseRedirect(here)
    record_pause(request, "queue", queue, verb)
    return HttpResponseRedirect(here)


def record_pause(request: HttpRequest, kind: str, name: str, verb: str) -> None:
    """Log a pause or resume of ``kind`` (queue, cron task) and say so.

    Both are ``QueuePause`` rows: a pause adds one, a resume deletes it.
    """
    log_operator_action(
        request,
        QueuePause,
        [(name, f"{kind} {name}")],
        flag=ADDITION if verb == "pause" else DELETION,
        message=f"{verb.capitalize()}d {kind} {name} (admin)",
    )
    messages.success(request, f"{kind.capitalize()} {name} {verb}d.")
