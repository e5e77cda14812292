"""The jobs list and the job page.

The list is built for millions of rows: newest first on the primary key
(UUIDv7 ids are creation-ordered), filters whose choices are declared, an
estimated count past 10,000 rows, search by id, id prefix or idempotency
key, and the wide columns (input, stack, history) left unread. The job
page renders :func:`django_ultimate_jobs.operator.show`: error and stack,
the remaining retry schedule, the steps, and the job data (input, progress,
result, each step's output) redacted.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from .. import operator
from ..errors import JobRowStatusUnknown, JobsError
from ..models import Job
from ..states import FINISHED_STATES, LIVE_STATES, PROMOTABLE_STATES, JobState
from . import cron_tasks, dashboard, dead_letter, events, leases, queues, workers
from .actions import JobActions, operate_view
from .filters import FILTER_PARAMETERS, LIST_FILTERS, StateFilter
from .guards import ListGuard, searchable
from .history import attempt_rows, progress_bar
from .humane import counted, humane_time
from .paging import EstimatedCountPaginator
from .storage import tables_elsewhere

__all__ = ["JobAdmin"]

# Columns the list never shows: reading them would move kilobytes a row.
_WIDE = ("input", "last_error_stack", "history", "result", "progress")
_HEX = frozenset("0123456789abcdef")
_MIN_PREFIX = 4
# The pages routed under the jobs URLs: slug -> module with view().
_PAGES = {
    "dead-letter": dead_letter,
    "queues": queues,
    "cron-tasks": cron_tasks,
    "workers": workers,
    "leases": leases,
    "events": events,
    "dashboard": dashboard,
}
# Which single-job verbs a state allows (the page offers only these).
_VERB_STATES = {
    "retry": FINISHED_STATES,
    "cancel": LIVE_STATES,
    "promote": PROMOTABLE_STATES,
    "remove": frozenset(JobState) - {JobState.RUNNING},
}


@admin.register(Job)
class JobAdmin(ListGuard, JobActions, admin.ModelAdmin):
    """Jobs: a fast list, a read-only page, permission-gated verbs."""

    choice_parameters = {
        StateFilter.parameter_name: frozenset(s.value for s in JobState)
    }

    list_display = (
        "short_id",
        "name_shown",
        "queue",
        "state_badge",
        "attempts",
        "error_summary",
        "run_at_shown",
        "updated_at_shown",
    )
    list_display_links = ("short_id",)
    actions = (
        "retry_selected",
        "cancel_selected",
        "promote_selected",
        "remove_selected",
    )
    list_filter = LIST_FILTERS
    search_fields = ("idempotency_key",)
    search_help_text = "A job id, the first hex digits of one, or an idempotency key."
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    # Facet counts would run one COUNT per filter choice over the table.
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    change_list_template = "admin/django_ultimate_jobs/job_list.html"

    # -- read-only: jobs are written by enqueue and the operator verbs -----

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Jobs are enqueued by code, never typed in."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """No field is editable; the verbs have their own permissions."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Removal goes through ``remove_job`` and the operator module."""
        return False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list filters' own parameters: state, queue, name, tenant.

        Django's default takes any lookup on any column from the query
        string. ``?input__password__startswith=h`` would then tell a viewer
        whether a redacted secret starts with h, ``?last_error__regex=(``
        would reach PostgreSQL as a broken pattern, and any lookup could
        scan the whole table. Refused, the changelist raises
        ``DisallowedModelAdminLookup``: a 400, whatever the value.
        """
        return lookup in FILTER_PARAMETERS

    def selection_problem(self, value: str) -> JobsError | None:
        """A selected id that is not a UUID: ``X_JOB_ID_INVALID``."""
        try:
            operator.parse_job_id(value)
        except JobsError as error:
            return error
        return None

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        """The job rows without their wide JSON and text columns."""
        return super().get_queryset(request).defer(*_WIDE)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """An id, an id prefix (>= 4 hex digits) or an idempotency key."""
        term = search_term.strip()
        if not term:
            return queryset, False
        if not searchable(term):
            return queryset.none(), False
        digits = term.lower().replace("-", "")
        match = Q(idempotency_key=term)
        if len(digits) == 32 and set(digits) <= _HEX:
            match |= Q(id=UUID(digits))
        elif _MIN_PREFIX <= len(digits) < 32 and set(digits) <= _HEX:
            # A prefix is a range of the primary key, so the index serves it.
            low, high = digits.ljust(32, "0"), digits.ljust(32, "f")
            match |= Q(id__gte=UUID(low), id__lte=UUID(high))
        return queryset.filter(match), False

    # -- columns ---------------------------------------------------------------

    @admin.display(description="id", ordering="id")
    def short_id(self, job: Job) -> str:
        """The id's first 13 characters, whole on hover and on the job page."""
        return format_html('<span title="{}">{}…</span>', job.id, str(job.id)[:13])

    @admin.display(description="name", ordering="name")
    def name_shown(self, job: Job) -> str:
        """The job's name, cut by the column (``accounts.send_welco…``); whole on hover."""
        return format_html(
            '<span class="uj-cut uj-name" title="{}">{}</span>', job.name, job.name
        )

    @admin.display(description="state", ordering="state")
    def state_badge(self, job: Job) -> str:
        """The state, styled by kind."""
        return format_html(
            '<span class="uj-state uj-{}">{}</span>', job.state, job.state
        )

    @admin.display(description="attempts")
    def attempts(self, job: Job) -> str:
        """Attempts spent of those allowed."""
        return f"{job.attempt}/{job.max_attempts}"

    @admin.display(description="last error")
    def error_summary(self, job: Job) -> str:
        """The first line of the last error, cut by the column; whole on hover.

        A done job's error is history (the job page shows it as the earlier
        error), not its current one: nothing here.
        """
        if job.state == JobState.DONE or not job.last_error:
            return ""
        first = job.last_error.splitlines()[0]
        if not first:
            return ""
        return format_html('<span class="uj-cut" title="{}">{}</span>', first, first)

    @admin.display(description="run at", ordering="run_at")
    def run_at_shown(self, job: Job) -> str:
        """When it runs (or ran): "in 5 min", the date on hover."""
        return humane_time(job.run_at, compact=True)

    @admin.display(description="updated", ordering="updated_at")
    def updated_at_shown(self, job: Job) -> str:
        """Its last change: "3 min ago", the date on hover."""
        return humane_time(job.updated_at, compact=True)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, or why it is empty on a driver without the tables."""
        elsewhere = tables_elsewhere(self, request, "Jobs", "python manage.py jobs ls")
        if elsewhere is not None:
            return elsewhere
        return super().changelist_view(request, extra_context)

    # -- the job page ------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The job page: what ``operator.show`` answers, and the allowed verbs."""
        if not self.has_view_permission(request):
            # 403, as every other page of the app answers a user without rights.
            raise PermissionDenied("needs the view_job permission")
        try:
            job = operator.show(object_id)
        except JobRowStatusUnknown as error:
            # The job exists but a row holds a status this version does not
            # know (a newer version wrote it): say so, as `jobs show` does.
            return TemplateResponse(
                request,
                "admin/django_ultimate_jobs/job_unreadable.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"Job {object_id}",
                    "error": error.render(),
                    "list_url": reverse("admin:ultimate_jobs_job_changelist"),
                },
            )
        except JobsError as error:
            raise Http404(error.cause) from error
        state = JobState(job["state"])
        verbs = [
            verb
            for verb, states in _VERB_STATES.items()
            if state in states and request.user.has_perm(f"ultimate_jobs.{verb}_job")
        ]
        # Job data as operator.show answers it: REDACT_KEYS values redacted.
        steps = [
            {**step, "output_json": _pretty(step["output"])} for step in job["steps"]
        ]
        rows = attempt_rows(job["history"])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{job['name']} {job['id']}",
            "job": {**job, "steps": steps},
            "attempts": rows,
            "attempts_note": _attempts_note(rows),
            "progress": progress_bar(job["progress"]),
            # An error the job has since succeeded past is history, not its state.
            "error_is_past": state is JobState.DONE,
            "finished": state in FINISHED_STATES,
            "verbs": verbs,
            "as_json": {
                key: _pretty(job[key]) for key in ("input", "progress", "result")
            },
            "list_url": reverse("admin:ultimate_jobs_job_changelist"),
        }
        return TemplateResponse(
            request, "admin/django_ultimate_jobs/job_detail.html", context
        )

    # -- the other pages live under the jobs URLs ---------------------------------

    def get_urls(self) -> list[URLPattern]:
        """Dead letters, queues, cron tasks, workers, leases, events, dashboard, verbs."""
        wrap = self.admin_site.admin_view
        pages = [
            path(
                f"{slug}/",
                wrap(lambda request, page=page: page.view(self, request)),
                name=f"ultimate_jobs_job_{slug.replace('-', '_')}",
            )
            for slug, page in _PAGES.items()
        ]
        pages.append(
            path(
                "<uuid:job_id>/operate/<str:verb>/",
                wrap(lambda r, job_id, verb: operate_view(self, r, job_id, verb)),
                name="ultimate_jobs_job_operate",
            )
        )
        return pages + super().get_urls()


def _attempts_note(rows: list[dict[str, Any]]) -> str:
    """ "4 attempts in all, across 1 retry", or "" when never retried."""
    retries = sum(row["kind"] == "retry" for row in rows)
    if not retries:
        return ""
    attempts = len(rows) - retries
    return (
        f"{counted(attempts, 'attempt')} in all, "
        f"across {counted(retries, 'retry', 'retries')}"
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
