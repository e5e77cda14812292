"""Traces in one process: enqueue, attempts, steps, cron, outbox, webhooks.

Spans go to the SDK's in-memory exporter (the ``recorder`` fixture pins a
provider for the test); jobs run through ``run_jobs()``, the real executor,
on the Postgres driver with a frozen clock the tests move. The trace through
a real ``runjobs`` subprocess is tests/acceptance/test_traces.py; that
nothing is imported without a provider, tests/test_tracing_imports.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings

from django_ultimate_jobs import task, tracing
from django_ultimate_jobs.crontask import unregister_task
from django_ultimate_jobs.errors import SettingsInvalid
from django_ultimate_jobs.outbox import publish_pending
from django_ultimate_jobs.testing import run_jobs, run_scheduler
from django_ultimate_jobs.webhooks import create_endpoint, deliver
from django_ultimate_jobs.webhooks.models import WebhookDelivery
from tests.jobsapp.jobs import noop, traced_steps
from tests.support.spans import (
    PREFIX,
    child_of,
    find,
    one,
    traceparent,
)
from tests.support.webhook_server import Reply

pytestmark = pytest.mark.postgres


def _row(driver, job_id):
    return driver.get(job_id)


def test_each_attempt_and_step_is_a_span_under_the_enqueue(pg_driver, clock, recorder):
    """First attempt: the enqueue's child; the retry: linked, a trace of its own."""
    with recorder.tracer().start_as_current_span("caller"):
        job_id = traced_steps.enqueue(order="o-1").id
    assert [e.outcome for e in run_jobs()] == ["retried"]
    clock.advance(timedelta(seconds=1))
    assert [e.outcome for e in run_jobs()] == ["completed"]

    spans = recorder.spans()
    caller, enqueue = one(spans, "caller"), one(spans, "enqueue default")
    assert child_of(enqueue, caller) and enqueue["kind"] == "PRODUCER"
    assert _row(pg_driver, job_id).traceparent == traceparent(enqueue)
    first = one(spans, "process default", job__attempt=1)
    retry = one(spans, "process default", job__attempt=2)
    assert child_of(first, enqueue) and first["kind"] == "CONSUMER"
    assert retry["parent_span_id"] is None and retry["trace_id"] != caller["trace_id"]
    link = {"trace_id": enqueue["trace_id"], "span_id": enqueue["span_id"]}
    assert first["links"] == retry["links"] == [link]
    assert first["attributes"] == {
        "messaging.system": "django_ultimate_jobs",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": str(job_id),
        "messaging.client.id": "run_jobs",
        PREFIX + "job.name": "tests.traced_steps",
        PREFIX + "job.run_id": str(job_id),
        PREFIX + "job.attempt": 1,
        PREFIX + "job.max_attempts": 3,
        PREFIX + "job.outcome": "retried",
        PREFIX + "job.state": "ready",
        "error.type": "X_CARD_SOFT_DECLINED",
    }
    assert first["status"] == "ERROR" and retry["status"] == "UNSET"
    steps = [
        (s["name"], s["attributes"][PREFIX + "step.replayed"])
        for s in spans
        if s["name"].startswith("step ")
    ]
    assert steps == [
        ("step reserve", False),
        ("step reserve", True),
        ("step charge", False),
    ]
    assert all(
        child_of(s, first if s["trace_id"] == first["trace_id"] else retry)
        for s in find(spans, "step reserve") + find(spans, "step charge")
    )


def test_enqueue_many_is_one_producer_span_every_row_carries(pg_driver, recorder):
    answers = noop.enqueue_many([{"n": n} for n in range(3)])
    (batch,) = recorder.spans()
    assert batch["name"] == "enqueue default"
    assert batch["attributes"]["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in batch["attributes"]
    assert {_row(pg_driver, a.id).traceparent for a in answers} == {traceparent(batch)}
    run_jobs()
    runs = find(recorder.spans(), "process default")
    assert len(runs) == 3 and all(child_of(run, batch) for run in runs)


def test_a_cron_made_job_runs_linked_to_its_fire_not_as_its_child(
    pg_driver, clock, recorder
):
    """A schedule's runs would otherwise all hang under one long-lived span."""
    hourly = task(name="tests.trace.hourly", cron="@hourly", tz="UTC", job=noop)
    try:
        run_scheduler(tasks=[hourly])  # arms the watermark
        clock.advance(timedelta(hours=1))
        (fired,) = run_scheduler(tasks=[hourly])
        run_jobs()
    finally:
        unregister_task("tests.trace.hourly")
    spans = recorder.spans()
    fire = one(spans, "fire default", cron__task="tests.trace.hourly")
    assert fire["kind"] == "PRODUCER"
    (job_id,) = fired.job_ids
    assert _row(pg_driver, job_id).traceparent == traceparent(fire)
    run = one(spans, "process default")
    assert run["parent_span_id"] is None and run["trace_id"] != fire["trace_id"]
    assert run["links"] == [{"trace_id": fire["trace_id"], "span_id": fire["span_id"]}]


def test_the_outbox_stages_in_a_create_span_and_the_relay_publishes_in_its_own(
    pg_driver, recorder
):
    """The staged message keeps the creation context; the publish links to it."""
    with transaction.atomic():
        job_id = noop.using(outbox=True).enqueue(n=1).id
    # Under TestCase nothing commits: publish here, as a relay would.
    assert publish_pending(driver=pg_driver) == 1
    run_jobs()
    spans = recorder.spans()
    stage = one(spans, "stage default")
    assert (stage["kind"], stage["attributes"]["messaging.operation.type"]) == (
        "PRODUCER",
        "create",
    )
    publish = one(spans, "publish default")
    assert publish["kind"] == "CLIENT" and publish["parent_span_id"] is None
    assert publish["links"] == [
        {"trace_id": stage["trace_id"], "span_id": stage["span_id"]}
    ]
    assert publish["attributes"][PREFIX + "outbox.published"] == 1
    assert _row(pg_driver, job_id).traceparent == traceparent(stage)
    assert child_of(one(spans, "process default"), stage)


def test_a_webhook_post_is_a_client_span_of_its_attempt(hooks, server, clock, recorder):
    create_endpoint(server.url() + "?token=s3cret", topics=["*"])
    server.script(Reply(500))
    (delivery,) = deliver("invoice.paid", {"invoice": 7})
    run_jobs()
    clock.advance(timedelta(minutes=5))
    run_jobs()

    spans = recorder.spans()
    posts = find(spans, "POST")
    assert [p["attributes"]["http.response.status_code"] for p in posts] == [500, 200]
    failed, landed = posts
    assert (failed["status"], failed["attributes"]["error.type"]) == ("ERROR", "500")
    assert landed["status"] == "UNSET"
    job_id = str(WebhookDelivery.objects.get(pk=delivery.pk).job_id)
    attempts = [
        s
        for s in spans
        if s["kind"] == "CONSUMER" and s["attributes"]["messaging.message.id"] == job_id
    ]
    assert [child_of(p, a) for p, a in zip(posts, attempts, strict=True)] == [
        True,
        True,
    ]
    attributes = landed["attributes"]
    assert attributes["url.full"] == server.url() + "?…"  # no token in a trace
    assert (attributes["server.address"], attributes["server.port"]) == (
        "127.0.0.1",
        server.port,
    )
    assert attributes[PREFIX + "webhook.delivery_id"] == delivery.pk


def test_auto_waits_for_a_provider_and_false_turns_tracing_off(settings):
    """The test process imported the API but set no global provider: "auto" is off."""
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"]}
    tracing.reset()
    assert tracing.enabled() is False
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"], "TRACING": True}
    assert tracing.enabled() is True
    settings.ULTIMATE_JOBS = {"QUEUES": ["default"], "TRACING": False}
    assert tracing.enabled() is False


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_tracing_takes_auto_true_or_false(value):
    with (
        override_settings(ULTIMATE_JOBS={"TRACING": value}),
        pytest.raises(SettingsInvalid, match=r"TRACING.*\"auto\", True or False"),
    ):
        tracing.enabled()


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        # (trace id, span id, flags) read back, or None: no creation context
        (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1),
        ),
        (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 0),
        ),
        (
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later",
            (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1),
        ),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", None),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", None),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", None),
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", None),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", None),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", None),
        ("00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", None),
        (
            " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\t",
            (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1),
        ),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + "x" * 460, None),
        ("", None),
        (None, None),
    ],
)
def test_a_stored_traceparent_is_read_as_the_w3c_propagator_reads_it(stored, expected):
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )

    from django_ultimate_jobs.tracing.spans import creation_context

    context = creation_context(stored)

    if expected is None:
        assert context is None
    else:
        assert (context.trace_id, context.span_id, context.trace_flags) == expected
        assert context.is_remote and context.is_valid
    # The same answer as the propagator the spans used to go through.
    if stored:
        carried = TraceContextTextMapPropagator().extract({"traceparent": stored})
        theirs = get_current_span(carried).get_span_context()
        assert (theirs.is_valid and theirs) == (context or False)
