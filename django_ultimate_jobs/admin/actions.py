"""The verbs: retry (optionally from a step), cancel, run now, remove.

Each is offered twice, as a list action over the selected jobs and as a
button on the job page; both render a confirmation page first, act only on
the confirming POST, check the verb's permission on every request, call
:mod:`django_ultimate_jobs.operator` and nothing else, and log each job
acted on to ``LogEntry``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, DELETION
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from .. import operator
from ..drivers.base import MAX_BULK_ROWS
from ..errors import JobNotFound, JobsError, StepNotFound
from ..models import Job
from .audit import (
    VERB_PERMISSIONS,
    confirmation,
    is_confirmed,
    log_operator_action,
    require,
)
from .humane import counted

__all__ = ["JobActions", "operate_view"]

_PAST = {
    "retry": "queued again",
    "cancel": "cancelled",
    "promote": "due now",
    "remove": "removed",
}
_LABELS = {
    "retry": "Retry",
    "cancel": "Cancel",
    "promote": "Run now",
    "remove": "Remove",
}


def _call(verb: str, job_id: str, from_step: str | None = None) -> None:
    verbs: dict[str, Callable[[], Any]] = {
        "retry": lambda: operator.retry(job_id, from_step=from_step or None),
        "cancel": lambda: operator.cancel(job_id, reason="cancelled from the admin"),
        "promote": lambda: operator.promote(job_id),
        "remove": lambda: operator.remove(job_id),
    }
    verbs[verb]()


def _message(verb: str, from_step: str | None) -> str:
    suffix = f" from step {from_step}" if from_step else ""
    return f"{_LABELS[verb]}{suffix} (admin)"


def _apply(
    request: HttpRequest, verb: str, jobs: list[tuple[str, str]], from_step: str | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """Run ``verb`` on each job; answers what landed and the refusals."""
    done: list[tuple[str, str]] = []
    refusals: list[str] = []
    for job_id, label in jobs:
        try:
            _call(verb, job_id, from_step)
        except JobsError as error:
            refusals.append(f"Job {job_id}: {error.render()}")
        else:
            done.append((job_id, label))
    flag = DELETION if verb == "remove" else CHANGE
    log_operator_action(
        request, Job, done, flag=flag, message=_message(verb, from_step)
    )
    return done, refusals


def _report(request: HttpRequest, verb: str, done: int, refusals: list[str]) -> None:
    if done:
        messages.success(request, f"{counted(done, 'job')} {_PAST[verb]}.")
    for refusal in refusals[:10]:
        messages.error(request, refusal)
    if len(refusals) > 10:
        messages.error(request, f"... and {len(refusals) - 10} more refusals.")


class JobActions:
    """List actions and the permission hooks Django's action filter calls."""

    admin_site: admin.AdminSite  # provided by the ModelAdmin this is mixed into

    def has_retry_job_permission(self, request: HttpRequest) -> bool:
        """``ultimate_jobs.retry_job``."""
        return bool(request.user.has_perm("ultimate_jobs.retry_job"))

    def has_cancel_job_permission(self, request: HttpRequest) -> bool:
        """``ultimate_jobs.cancel_job``."""
        return bool(request.user.has_perm("ultimate_jobs.cancel_job"))

    def has_promote_job_permission(self, request: HttpRequest) -> bool:
        """``ultimate_jobs.promote_job``."""
        return bool(request.user.has_perm("ultimate_jobs.promote_job"))

    def has_remove_job_permission(self, request: HttpRequest) -> bool:
        """``ultimate_jobs.remove_job``."""
        return bool(request.user.has_perm("ultimate_jobs.remove_job"))

    def _bulk(
        self, request: HttpRequest, queryset: QuerySet[Job], verb: str
    ) -> HttpResponse | None:
        # Checked again here: the action filter hides the action, this
        # refuses a POST that names it anyway.
        require(request, VERB_PERMISSIONS[verb])
        rows = list(queryset.order_by("id").values_list("id", "name")[:MAX_BULK_ROWS])
        jobs = [(str(job_id), f"{name} {job_id}") for job_id, name in rows]
        if not jobs:
            # Nothing to confirm: no "0 jobs?" page, no empty log.
            gone = JobNotFound(
                "none of the selected jobs exists any more",
                fix="reload the list",
            )
            messages.error(request, gone.render())
            return None
        if not is_confirmed(request):
            return confirmation(
                request,
                {
                    **self.admin_site.each_context(request),
                    "title": f"{_LABELS[verb]} {counted(len(jobs), 'job')}?",
                    "verb": verb,
                    "verb_label": _LABELS[verb],
                    "jobs": jobs,
                    "action": request.POST.get("action"),
                    "selected": [job_id for job_id, _ in jobs],
                    "opts": Job._meta,
                },
            )
        done, refusals = _apply(request, verb, jobs, None)
        _report(request, verb, len(done), refusals)
        return None

    @admin.action(permissions=["retry_job"], description="Retry selected jobs")
    def retry_selected(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse | None:
        """Requeue the selected finished jobs."""
        return self._bulk(request, queryset, "retry")

    @admin.action(permissions=["cancel_job"], description="Cancel selected jobs")
    def cancel_selected(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse | None:
        """Cancel the selected live jobs."""
        return self._bulk(request, queryset, "cancel")

    @admin.action(permissions=["promote_job"], description="Run selected jobs now")
    def promote_selected(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse | None:
        """Make the selected waiting jobs due now."""
        return self._bulk(request, queryset, "promote")

    @admin.action(permissions=["remove_job"], description="Remove selected jobs")
    def remove_selected(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse | None:
        """Delete the selected jobs that are not running."""
        return self._bulk(request, queryset, "remove")


def operate_view(
    model_admin: Any, request: HttpRequest, job_id: UUID, verb: str
) -> HttpResponse:
    """One verb on one job: confirm on GET, act on the confirming POST."""
    if verb not in VERB_PERMISSIONS:
        raise Http404("no such verb")
    require(request, VERB_PERMISSIONS[verb])
    try:
        job = operator.show(job_id)
    except JobsError as error:
        raise Http404(error.cause) from error
    from_step = (request.POST.get("from_step") or request.GET.get("from_step")) or None
    page = reverse("admin:ultimate_jobs_job_change", args=[str(job_id)])
    if verb == "retry" and from_step:
        steps = [entry["name"] for entry in job.get("steps") or ()]
        if from_step not in steps:
            # Refused before the confirmation: asking "retry from step X?"
            # about a step the run never recorded would refuse after the press.
            listed = ", ".join(map(repr, steps)) if steps else "none"
            refusal = StepNotFound(
                f"the job has no step named {from_step!r:.80}; its steps: {listed}",
                meta={"id": str(job["id"]), "step": from_step, "steps": steps},
            )
            _report(request, verb, 0, [f"Job {job['id']}: {refusal.render()}"])
            return HttpResponseRedirect(page)
    if not is_confirmed(request):
        label = f"{_LABELS[verb]} from step {from_step}" if from_step else _LABELS[verb]
        return confirmation(
            request,
            {
                **model_admin.admin_site.each_context(request),
                "title": f"{label}: {job['name']} {job['id']}?",
                "verb": verb,
                "verb_label": label,
                "jobs": [(job["id"], f"{job['name']} {job['id']} ({job['state']})")],
                "from_step": from_step,
                "cancel_url": page,
                "opts": Job._meta,
            },
        )
    done, refusals = _apply(
        request, verb, [(job["id"], f"{job['name']} {job['id']}")], from_step
    )
    _report(request, verb, len(done), refusals)
    if verb == "remove" and done:
        return HttpResponseRedirect(reverse("admin:ultimate_jobs_job_changelist"))
    return HttpResponseRedirect(page)
