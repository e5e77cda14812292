"""Stored data an attacker controls: secrets in every JSON column, terminal
escapes and forged lines in every text column.

``seed()`` writes it through the real paths where there is one (a job run
with steps, an event, an outbox enqueue, a lease) and by hand where the
column is only written by code outside a test's reach (a stored cron task
no code declares any more, a worker row, the progress rows of a consumer,
a subject request, a reindex, an export and an import, a webhook endpoint
and its deliveries). The surface tests
(tests/test_surfaces.py) then look at every admin page and command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.utils import timezone

from django_ultimate_jobs import Retry, backfill, job, publish_event
from django_ultimate_jobs.backfills import enqueue_backfill, unregister_backfill
from django_ultimate_jobs.consumers import consumer, unregister_consumer
from django_ultimate_jobs.drivers.base import Enqueued
from django_ultimate_jobs.models import (
    Backfill,
    Consumer,
    CronTask,
    ErasureRecord,
    Export,
    Import,
    InboundDelivery,
    Job,
    OutboxMessage,
    QueuePause,
    Reindex,
    SubjectRequest,
    WebhookDelivery,
    WebhookEndpoint,
    Worker,
)
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.webhooks.declaration import DEFAULT_WEBHOOK
from tests.jobsapp.jobs import noop
from tests.jobsapp.models import BackfillItem

__all__ = [
    "ESCAPED",
    "ESCAPED_JSON",
    "FORGED",
    "HOSTILE",
    "SECRETS",
    "VISIBLE",
    "Seeded",
    "raw_control_characters",
    "seed",
    "unseed",
]

# A retitle and a recolour (OSC 0, SGR 31), then a line that would pass for
# a row of `jobs ls`, then an 8-bit CSI (C1) and DEL.
CONTROL = "\x1b]0;pwn\x07\x1b[31m"
FORGED = "FORGED-ROW"
HOSTILE = f"{CONTROL}\n{FORGED} 00000000-0000-7000-8000-000000000000  ready\x9b2J\x7f"
ESCAPED = "\\x1b]0;pwn\\x07\\x1b[31m\\nFORGED-ROW"
"""What a terminal-safe print shows of ``HOSTILE``'s start."""
ESCAPED_JSON = "\\u001b]0;pwn\\u0007\\u001b[31m\\nFORGED-ROW"
"""The same, inside job data a command prints as one line of JSON."""

# One secret per place structured job data is kept, each under a key
# REDACT_KEYS hides; none may reach a page or a terminal in clear.
SECRETS = {
    "input": "IN-PW-5ecret-1",
    "input_nested": "IN-KEY-5ecret-2",
    "result": "RESULT-5ecret-3",
    "progress": "PROGRESS-5ecret-4",
    "step_output": "STEP-5ecret-5",
    "event_payload": "EVENT-5ecret-6",
    "outbox_input": "OUTBOX-5ecret-7",
    "backfill_cursor": "CURSOR-5ecret-8",
    "consumer_cursor": "STREAM-5ecret-9",
    "pass_cursor": "PASS-5ecret-10",
    "export_params": "PARAMS-5ecret-11",
    "subject_summary": "SUMMARY-5ecret-12",
    "delivery_body": "BODY-5ecret-13",
}
# Beside each secret, a value that is not one: a surface that shows the data
# shows it (so a page that drops the data whole does not pass for redacted).
VISIBLE = {
    "input": "IN-VISIBLE",
    "result": "RESULT-VISIBLE",
    "progress": "PROGRESS-VISIBLE",
    "step_output": "STEP-VISIBLE",
    "event_payload": "EVENT-VISIBLE",
    "outbox_input": "OUTBOX-VISIBLE",
    "backfill_cursor": "CURSOR-VISIBLE",
    "consumer_cursor": "STREAM-VISIBLE",
    "pass_cursor": "PASS-VISIBLE",
    "export_params": "PARAMS-VISIBLE",
    "subject_summary": "SUMMARY-VISIBLE",
    "delivery_body": "BODY-VISIBLE",
}

LEAKY = "t.hostile.leaky"
BROKEN = "t.hostile.broken"
FILL = "t.hostile.fill"
STREAM = "t.hostile.stream"
REINDEX = "tests.articles"  # declared by tests.jobsapp.jobs
ARTIFACTS = "tests.items"  # the export and the import of tests.jobsapp.jobs
PREFIX = "exports/hostile"
PAID = "t.hostile.paid"
TASK_NAME = f"t.hostile.gone{HOSTILE}"
_GROUP = 9  # the BackfillItem rows of the hostile backfill


@dataclass
class Seeded:
    """The ids of what ``seed()`` wrote."""

    leaky: UUID
    broken: UUID
    ready: UUID
    delayed: UUID
    outbox: UUID
    lease_key: str
    fill: Enqueued
    """The backfill's failed pass (``jobs_backfill --write`` follows one)."""
    subject_request: UUID
    erasure: int
    export: int
    import_: int
    endpoint: int
    delivery: int
    inbound: int


def raw_control_characters(text: str) -> list[str]:
    """The control characters of ``text`` other than the line breaks."""
    return sorted(
        {
            char
            for char in text
            if char != "\n" and (ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F)
        }
    )


def _fetch() -> dict[str, Any]:
    return {"token": SECRETS["step_output"], "rows": VISIBLE["step_output"]}


def _declined() -> None:
    raise RuntimeError(f"declined {HOSTILE}")


def _leaky(ctx: Any, **input: Any) -> dict[str, Any]:
    ctx.step.run(f"fetch {HOSTILE}", _fetch)
    paid = ctx.step.wait_for_event("approve", PAID, key="k1")
    return {"api_key": SECRETS["result"], "paid": paid, "note": VISIBLE["result"]}


def _broken(ctx: Any, **input: Any) -> None:
    ctx.step.run(f"charge {HOSTILE}", _declined)


def _fill(rows: list[Any]) -> None:
    raise RuntimeError(f"page refused {HOSTILE}")


def seed(driver: Any) -> Seeded:
    """Write the hostile data through ``driver`` (the test's Postgres one)."""
    leaky = job(name=LEAKY, retry=Retry(attempts=1))(_leaky).enqueue(
        password=SECRETS["input"],
        profile={"api_key": SECRETS["input_nested"], "city": VISIBLE["input"]},
        note=HOSTILE,
    )
    broken = job(name=BROKEN, retry=Retry(attempts=1))(_broken).enqueue(
        password=SECRETS["input"], note=HOSTILE, city=VISIBLE["input"]
    )
    run_jobs(queues=["default"], driver=driver)  # leaky parks on its wait
    payload = {
        "card": {"secret": SECRETS["event_payload"]},
        "by": VISIBLE["event_payload"],
    }
    publish_event(PAID, payload, key="k1")
    run_jobs(queues=["default"], driver=driver)
    # ctx.progress writes done/total/note; a row written by an older
    # release, or by hand, holds what it holds.
    Job.objects.filter(id=leaky.id).update(
        progress={
            "done": 1,
            "total": 2,
            "note": VISIBLE["progress"],
            "token": SECRETS["progress"],
        },
        tenant_id=f"acme {HOSTILE}",
    )
    ready = noop.enqueue(n=1).id
    delayed = noop.using(delay="1h").enqueue(n=2).id
    Job.objects.filter(id=delayed).update(queue=f"q {HOSTILE}")
    outbox = noop.using(outbox=True).enqueue(
        password=SECRETS["outbox_input"], note=HOSTILE, n=VISIBLE["outbox_input"]
    )
    OutboxMessage.objects.filter(id=outbox.id).update(
        attempts=1, last_error=f"refused {HOSTILE}", claimed_by=f"relay {HOSTILE}"
    )
    lease_key = f"lock:{HOSTILE}"
    driver.leases.acquire(lease_key, 1, 30_000, f"holder {HOSTILE}")
    now = timezone.now()
    far = now + timedelta(days=36_500)
    Worker.objects.create(
        id=f"w {HOSTILE}",
        host=f"host {HOSTILE}",
        pid=1,
        queues=[f"q {HOSTILE}"],
        concurrency=1,
        in_flight=[],
        started_at=now,
        heartbeat_at=far,
        expires_at=far,
    )
    CronTask.objects.create(name=TASK_NAME, cron="* * * * *", tz="UTC", watermark=now)
    QueuePause.objects.create(kind="queue", name=f"q {HOSTILE}", paused_at=now)
    QueuePause.objects.create(kind="task", name=TASK_NAME, paused_at=now)
    fill = _failed_backfill(driver)
    return Seeded(
        leaky=leaky.id,
        broken=broken.id,
        ready=ready,
        delayed=delayed,
        outbox=outbox.id,
        lease_key=lease_key,
        fill=fill,
        **_capabilities(now),
    )


def unseed() -> None:
    """Forget the jobs, the backfill and the consumer ``seed()`` declared."""
    for name in (LEAKY, BROKEN):
        unregister(name)
    unregister_backfill(FILL)
    unregister_consumer(STREAM)


def _secret(where: str) -> dict[str, str]:
    """A JSON value holding the secret of ``where`` beside its visible value."""
    return {"api_key": SECRETS[where], "id": VISIBLE[where]}


def _capabilities(now: Any) -> dict[str, Any]:
    """The rows of the consumers, subjects, passes and webhooks, by hand:
    only their jobs write them, and a stored error or cursor is what it is."""
    # order=None: its cursors are JSON objects (holding a secret), which a
    # "natural" order would refuse.
    consumer(
        name=STREAM, fetch=lambda cursor: None, handle=lambda items: None, order=None
    )
    failed = {"state": "failed", "error": f"page refused {HOSTILE}"}
    Consumer.objects.create(
        name=STREAM,
        state="halted",
        cursor=_secret("consumer_cursor"),
        error=f"halted {HOSTILE}",
    )
    request = SubjectRequest.objects.create(
        subject="tests.customer",
        kind="erase",
        state="failed",
        key_digest="hostile",
        requested_by=f"dpo {HOSTILE}",
        summary=[{"model": "jobsapp.Customer", **_secret("subject_summary")}],
        error=f"erase refused {HOSTILE}",
    )
    erasure = ErasureRecord.objects.create(
        request=request,
        subject="tests.customer",
        model="jobsapp.Customer",
        field="email",
        policy=f"retain: {HOSTILE}",
        rows=1,
        requested_by=f"dpo {HOSTILE}",
    )
    Reindex.objects.create(name=REINDEX, cursor=_secret("pass_cursor"), **failed)
    export = Export.objects.create(
        name=ARTIFACTS,
        prefix=PREFIX,
        format="csv",
        params=_secret("export_params"),
        cursor=_secret("pass_cursor"),
        **failed,
    )
    imported = Import.objects.create(
        name=ARTIFACTS, prefix=PREFIX, cursor=_secret("pass_cursor"), **failed
    )
    endpoint = WebhookEndpoint.objects.create(
        url="https://hooks.example.com/in",
        description=f"billing {HOSTILE}",
        topics=["*"],
        secret="whsec_" + "A" * 43,
        disabled_at=now,
        disabled_reason=f"refused {HOSTILE}",
    )
    body = {
        "card": {"secret": SECRETS["delivery_body"]},
        "by": VISIBLE["delivery_body"],
    }
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint,
        webhook=DEFAULT_WEBHOOK,
        topic="t.hostile",
        msg_id="msg_hostile",
        body=json.dumps(body),
        state="failed",
        attempts=1,
        attempt_log=[
            {
                "attempt": 1,
                "at": now.isoformat(),
                "status": 500,
                "duration_ms": 3,
                "error": f"refused {HOSTILE}",
            }
        ],
        last_status=500,
        last_error=f"refused {HOSTILE}",
    )
    inbound = InboundDelivery.objects.create(
        receiver=f"r {HOSTILE}", webhook_id=f"msg {HOSTILE}", signed_at=now, size=1
    )
    return {
        "subject_request": request.id,
        "erasure": erasure.id,
        "export": export.id,
        "import_": imported.id,
        "endpoint": endpoint.id,
        "delivery": delivery.id,
        "inbound": inbound.id,
    }


def _failed_backfill(driver: Any) -> Enqueued:
    BackfillItem.objects.bulk_create(BackfillItem(grp=_GROUP) for _ in range(3))
    backfill(
        name=FILL,
        source=lambda: BackfillItem.objects.filter(grp=_GROUP),
        handle=_fill,
        batch=2,
        rate=1000,
        retry=Retry(attempts=1),
    )
    enqueued = enqueue_backfill(FILL)
    run_jobs(queues=["ultimate_jobs"], driver=driver)
    row = Backfill.objects.get(name=FILL)
    assert row.state == "failed", row.state
    Backfill.objects.filter(name=FILL).update(
        cursor={"api_key": SECRETS["backfill_cursor"], "id": VISIBLE["backfill_cursor"]}
    )
    return enqueued
