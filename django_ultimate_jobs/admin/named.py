"""A verb on rows keyed by name (backfills, consumers): confirm, act, log.

The first POST renders the confirmation page listing the rows; the
confirming POST calls the verb once per name, reports each coded refusal
as an error message, and logs each row acted on to ``LogEntry``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from ..errors import JobsError
from .audit import confirmation, is_confirmed, log_operator_action
from .humane import counted

__all__ = ["apply_by_name"]


def apply_by_name(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    label: str,
    past: str,
    noun: str,
    verb: Callable[[str], Any],
    nothing: JobsError,
) -> HttpResponse | None:
    """Confirm, then apply ``verb`` to each selected row's ``name``.

    Args:
        action: the admin action's name (the confirmation page re-posts it).
        label: the verb as a button says it (``"Pause"``).
        past: what the log and the message say was done (``"paused"``).
        noun: what a row is (``"backfill"``).
        nothing: the refusal of a selection that holds no row (no
            "0 backfill(s)?" page, no empty log).
    """
    names = list(queryset.values_list("name", flat=True))
    if not names:
        messages.error(request, nothing.render())
        return None
    if not is_confirmed(request):
        return confirmation(
            request,
            {
                **model_admin.admin_site.each_context(request),
                "opts": model_admin.opts,
                "title": f"{label} {counted(len(names), noun)}?",
                "verb_label": label,
                "jobs": [(name, name) for name in names],
                "action": action,
                "selected": names,
            },
        )
    done: list[tuple[str, str]] = []
    for name in names:
        try:
            verb(name)
        except JobsError as error:
            messages.error(request, f"{noun.capitalize()} {name}: {error.render()}")
        else:
            done.append((name, f"{noun} {name}"))
    log_operator_action(
        request,
        model_admin.model,
        done,
        flag=CHANGE,
        message=f"{noun.capitalize()} {past} (admin)",
    )
    if done:
        messages.success(request, f"{counted(len(done), noun)} {past}.")
    return None
