"""The webhook retention task, and the attempt's cancellation rules."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ultimate_jobs.context import CancellationToken
from django_ultimate_jobs.crontask import registered_tasks
from django_ultimate_jobs.errors import Draining, JobTimeout
from django_ultimate_jobs.models import InboundDelivery, WebhookDelivery
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.webhooks import create_endpoint, rotate_secret
from django_ultimate_jobs.webhooks.builtin import (
    WEBHOOK_RETENTION_CRON,
    WEBHOOK_RETENTION_JOB,
    webhook_retention,
)
from django_ultimate_jobs.webhooks.delivery import Sender

pytestmark = pytest.mark.postgres


def test_the_retention_task_is_declared_daily_on_the_housekeeping_queue():
    (declared,) = [t for t in registered_tasks() if t.name == WEBHOOK_RETENTION_JOB]
    assert declared.cron == WEBHOOK_RETENTION_CRON
    assert webhook_retention.queue == "ultimate_jobs"


def test_old_finished_rows_go_pending_ones_stay(settings, pg_driver):
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"], "WEBHOOK_RETENTION": "7d"}
    endpoint, _ = create_endpoint("https://hooks.example.test/in", topics=["*"])
    old = timezone.now() - timedelta(days=8)
    recent = timezone.now() - timedelta(days=6)

    def delivery(msg_id, state, created_at):
        row = WebhookDelivery.objects.create(
            endpoint=endpoint,
            webhook="w",
            topic="t",
            msg_id=msg_id,
            body="{}",
            state=state,
        )
        WebhookDelivery.objects.filter(pk=row.pk).update(created_at=created_at)
        return row.pk

    gone = [delivery("a", "delivered", old), delivery("b", "failed", old)]
    kept = [delivery("c", "pending", old), delivery("d", "delivered", recent)]
    for webhook_id, at in (("x", old), ("y", recent)):
        row = InboundDelivery.objects.create(
            receiver="r", webhook_id=webhook_id, signed_at=at, size=2
        )
        InboundDelivery.objects.filter(pk=row.pk).update(received_at=at)
    rotate_secret(endpoint, overlap="1h")
    endpoint.refresh_from_db()
    type(endpoint).objects.filter(pk=endpoint.pk).update(
        previous_secret_until=timezone.now() - timedelta(minutes=1)
    )

    webhook_retention.enqueue()
    (execution,) = [e for e in run_jobs(queues=["ultimate_jobs"]) if e.result]
    assert execution.result == {
        "webhook_deliveries": 2,
        "inbound_deliveries": 1,
        "secrets_forgotten": 1,
    }
    assert sorted(WebhookDelivery.objects.values_list("pk", flat=True)) == sorted(kept)
    assert not WebhookDelivery.objects.filter(pk__in=gone).exists()
    assert list(InboundDelivery.objects.values_list("webhook_id", flat=True)) == ["y"]
    endpoint.refresh_from_db()
    assert (endpoint.previous_secret, endpoint.previous_secret_until) == (None, None)


class _Ctx:
    def __init__(self):
        self.cancellation = CancellationToken()


@pytest.mark.parametrize(
    ("reason", "cut"),
    [
        (Draining("the worker drains"), False),
        (JobTimeout("the attempt's deadline passed"), True),
    ],
)
def test_a_drain_lets_a_request_finish_its_deadline_cuts_it(reason, cut):
    """A POST on the wire at SIGTERM finishes (else every deploy re-posts);
    the attempt's own deadline or a lost lease cuts it."""
    ctx = _Ctx()
    aborted = []
    Sender._abort_hook(ctx)(lambda: aborted.append(True))
    ctx.cancellation.cancel(reason)
    assert aborted == ([True] if cut else [])
