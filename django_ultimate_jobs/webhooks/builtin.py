"""The built-in webhook declaration and the sweep of old webhook rows.

Imported by ``AppConfig.ready()``: ``ultimate_jobs.webhook`` is the
declaration :func:`~django_ultimate_jobs.webhooks.deliver` uses by default,
and ``ultimate_jobs.webhook_retention`` (daily at 04:37 UTC, on the
housekeeping queue) deletes finished deliveries and inbound rows older than
``WEBHOOK_RETENTION`` (default 30 days) in batches, and forgets replaced
secrets whose overlap ended.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db.models import Model, QuerySet
from django.utils import timezone

from ..conf import jobs_settings
from ..context import JobContext
from ..crontask import task
from ..jobs import job
from ..maintenance.builtin import housekeeping_queue
from .declaration import DEFAULT_WEBHOOK, webhook

__all__ = [
    "RETENTION_BATCH",
    "WEBHOOK_RETENTION_CRON",
    "WEBHOOK_RETENTION_JOB",
    "default_webhook",
    "sweep_webhooks",
    "webhook_retention",
]

logger = logging.getLogger("django_ultimate_jobs")

WEBHOOK_RETENTION_JOB = "ultimate_jobs.webhook_retention"
WEBHOOK_RETENTION_CRON = "37 4 * * *"
RETENTION_BATCH = 5_000
"""Rows per delete statement (short transactions, short locks)."""

default_webhook = webhook(name=DEFAULT_WEBHOOK)


def _delete_in_batches(rows: QuerySet[Any]) -> int:
    model: type[Model] = rows.model
    removed = 0
    while True:
        batch = list(rows.values_list("pk", flat=True)[:RETENTION_BATCH])
        if not batch:
            return removed
        removed += model._default_manager.filter(pk__in=batch).delete()[0]


def sweep_webhooks() -> dict[str, int]:
    """Delete webhook rows past ``WEBHOOK_RETENTION``; answer the counts.

    Deliveries still pending are kept whatever their age (a job may still
    send them); inbound rows older than the retention no longer refuse a
    replay, which the signature's 5-minute tolerance refuses anyway.
    """
    from .models import InboundDelivery, WebhookDelivery, WebhookEndpoint

    now = timezone.now()
    cutoff = now - timedelta(milliseconds=jobs_settings().webhook_retention_ms)
    report = {
        "webhook_deliveries": _delete_in_batches(
            WebhookDelivery.objects.filter(created_at__lt=cutoff).exclude(
                state=WebhookDelivery.State.PENDING
            )
        ),
        "inbound_deliveries": _delete_in_batches(
            InboundDelivery.objects.filter(received_at__lt=cutoff)
        ),
    }
    report["secrets_forgotten"] = WebhookEndpoint.objects.filter(
        previous_secret_until__lte=now
    ).update(previous_secret=None, previous_secret_until=None)
    return report


@job(
    name=WEBHOOK_RETENTION_JOB,
    queue=housekeeping_queue,
    idempotency_key=lambda _input: "webhook-retention",
)
def webhook_retention(ctx: JobContext) -> dict[str, int]:
    """Sweep old deliveries and inbound rows (see :func:`sweep_webhooks`)."""
    report = sweep_webhooks()
    if any(report.values()):
        logger.info("jobs.webhook.retention.swept", extra={"removed": report})
    return report


task(
    name=WEBHOOK_RETENTION_JOB,
    cron=WEBHOOK_RETENTION_CRON,
    tz="UTC",
    job=webhook_retention,
    catch_up="run-once",
)
