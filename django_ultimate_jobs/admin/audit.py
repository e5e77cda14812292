"""Permissions, confirmation pages and the admin log, shared by every page.

Being able to look at jobs must not mean being able to re-run payments:
each verb has its own permission, checked again on the POST that acts (a
hidden button is not a permission check).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest
from django.template.response import TemplateResponse

__all__ = [
    "VERB_PERMISSIONS",
    "confirmation",
    "is_confirmed",
    "log_operator_action",
    "require",
]

# Verb -> the Job permission it needs (models.Job.Meta.permissions).
VERB_PERMISSIONS = {
    "retry": "retry_job",
    "cancel": "cancel_job",
    "promote": "promote_job",
    "remove": "remove_job",
}
_APP = "ultimate_jobs"
CONFIRM_FIELD = "confirmed"
_ACROSS = "select_across"  # Django's "select all N" of a list


def require(request: HttpRequest, codename: str) -> None:
    """Refuse the request (403) unless the user holds ``codename``."""
    if not request.user.has_perm(f"{_APP}.{codename}"):
        raise PermissionDenied(f"needs the {codename} permission")


def is_confirmed(request: HttpRequest) -> bool:
    """Whether this is the second POST, sent from the confirmation page.

    The confirmation page pins the ids it listed and never sends
    ``select_across``: a POST that carries it selects "the whole filtered
    list", ids no confirmation pinned, so it is shown the confirmation.
    """
    return (
        request.method == "POST"
        and request.POST.get(CONFIRM_FIELD) == "yes"
        and request.POST.get(_ACROSS, "0") in ("", "0")
    )


def confirmation(request: HttpRequest, context: dict[str, Any]) -> TemplateResponse:
    """The "Are you sure?" page; its form re-posts with ``confirmed=yes``."""
    return TemplateResponse(
        request,
        "admin/django_ultimate_jobs/confirm.html",
        {"confirm_field": CONFIRM_FIELD, **context},
    )


def log_operator_action(
    request: HttpRequest,
    model: type[models.Model],
    objects: Iterable[tuple[str, str]],
    *,
    flag: int,
    message: str,
) -> None:
    """Record one ``LogEntry`` per ``(object_id, repr)`` acted on.

    Written from ids, not instances: a removed job has no row left to
    hand to ``LogEntry.objects.log_actions``.
    """
    content_type = ContentType.objects.get_for_model(model)
    user_id = request.user.pk
    assert user_id is not None  # admin views run for a logged-in user
    LogEntry.objects.bulk_create(
        [
            LogEntry(
                user_id=user_id,
                content_type=content_type,
                object_id=object_id,
                object_repr=label[:200],
                action_flag=flag,
                change_message=message,
            )
            for object_id, label in objects
        ]
    )
