"""The admin log entry of an endpoint the sender disabled by itself.

``LogEntry`` needs a user; an automatic disable is attributed to an
inactive user named ``ultimate-jobs`` (no usable password, made on first
need), so the endpoint's History page says who disabled it and why. A user
model that cannot make such a user (required fields beyond the username)
gets a log line instead (``jobs.webhook.disable-unlogged``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.apps import apps
from django.db import transaction

if TYPE_CHECKING:
    from .models import WebhookEndpoint

__all__ = ["SYSTEM_USERNAME", "log_disabled"]

logger = logging.getLogger("django_ultimate_jobs")

SYSTEM_USERNAME = "ultimate-jobs"


def log_disabled(endpoint: WebhookEndpoint, reason: str) -> None:
    """Write the ``LogEntry`` of an automatic disable (never raises)."""
    if not apps.is_installed("django.contrib.admin"):
        return
    try:
        with transaction.atomic():
            _write(endpoint, reason)
    except Exception as error:
        logger.warning(
            "jobs.webhook.disable-unlogged",
            extra={"endpoint_id": endpoint.pk, "error": type(error).__name__},
        )


def _write(endpoint: WebhookEndpoint, reason: str) -> None:
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.auth import get_user_model
    from django.contrib.contenttypes.models import ContentType

    users = get_user_model()
    user, created = users._default_manager.get_or_create(
        **{users.USERNAME_FIELD: SYSTEM_USERNAME}, defaults={"is_active": False}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    LogEntry.objects.create(
        user_id=user.pk,
        content_type=ContentType.objects.get_for_model(type(endpoint)),
        object_id=str(endpoint.pk),
        object_repr=str(endpoint)[:200],
        action_flag=CHANGE,
        change_message=f"{reason[:1].upper()}{reason[1:]} (webhook sender)",
    )
