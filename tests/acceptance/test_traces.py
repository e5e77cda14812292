"""One trace from a web request's enqueue through a real ``runjobs``.

The test process records its spans in memory (a pinned SDK provider); the
worker, started with tests/acceptance/otel_settings.py, configures its own
provider and appends every finished span to a file. The trace context
travels only through the job row's ``traceparent``.
"""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from tests.support.rows import job_row, state_of
from tests.support.spans import (
    PREFIX,
    child_of,
    find,
    one,
    read_spans,
    traceparent,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PICKUP_S = 20.0


def test_a_web_request_traces_through_a_retried_attempt_and_its_steps(
    fleet, recorder, client, tmp_path
):
    """Request -> enqueue (producer) -> attempt 1 (consumer, child) -> its step;
    attempt 2 (a retry) starts its own trace, linked to the enqueue, with
    the replayed step and the new one as its children."""
    with recorder.tracer().start_as_current_span(
        "GET /traced/enqueue/", kind=SpanKind.SERVER
    ):
        response = client.get("/traced/enqueue/", {"order": "o-7"})
    job_id = response.json()["id"]
    web = recorder.spans()
    request = one(web, "GET /traced/enqueue/")
    enqueue = one(web, "enqueue default")
    assert enqueue["kind"] == "PRODUCER" and child_of(enqueue, request)
    assert enqueue["attributes"] == {
        "messaging.system": "django_ultimate_jobs",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "default",
        "messaging.message.id": job_id,
        PREFIX + "job.name": "tests.traced_steps",
        PREFIX + "job.deduped": False,
    }
    # The row carries the producer span's context, and nothing else does.
    assert job_row(job_id).traceparent == traceparent(enqueue)

    spans_file = tmp_path / "worker-spans.jsonl"
    fleet.start(
        env={
            "DJANGO_SETTINGS_MODULE": "tests.acceptance.otel_settings",
            "UJ_SPANS_FILE": str(spans_file),
        }
    )
    wait_until(lambda: state_of(job_id) == "done", PICKUP_S, message=fleet.logs)
    worker = wait_until(
        lambda: (
            (spans := read_spans(spans_file))
            and len(find(spans, "process default", job__name="tests.traced_steps")) == 2
            and spans
        ),
        PICKUP_S,
        message=fleet.logs,
    )
    first = one(worker, "process default", job__attempt=1)
    retry = one(worker, "process default", job__attempt=2)

    # Attempt 1: the enqueue's child (and linked to it), failed with the code.
    assert first["kind"] == "CONSUMER" and child_of(first, enqueue)
    assert first["trace_id"] == request["trace_id"]
    assert first["links"] == [
        {"trace_id": enqueue["trace_id"], "span_id": enqueue["span_id"]}
    ]
    attributes = first["attributes"]
    assert attributes["messaging.system"] == "django_ultimate_jobs"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == "default"
    assert attributes["messaging.message.id"] == job_id
    assert attributes[PREFIX + "job.outcome"] == "retried"
    assert attributes[PREFIX + "job.state"] == "ready"
    assert attributes["error.type"] == "X_CARD_SOFT_DECLINED"
    assert (first["status"], first["status_description"]) == (
        "ERROR",
        "X_CARD_SOFT_DECLINED",
    )
    assert "exception" in first["events"]

    # Attempt 2: a trace of its own, linked (not a child) to the enqueue.
    assert retry["parent_span_id"] is None
    assert retry["trace_id"] != enqueue["trace_id"]
    assert retry["links"] == first["links"]
    assert retry["attributes"][PREFIX + "job.outcome"] == "completed"
    assert retry["attributes"][PREFIX + "job.state"] == "done"
    assert retry["status"] == "UNSET" and "error.type" not in retry["attributes"]

    # Each attempt's steps are its children; the retry replays "reserve".
    (reserve_1,) = [s for s in find(worker, "step reserve") if child_of(s, first)]
    assert reserve_1["kind"] == "INTERNAL"
    assert reserve_1["attributes"][PREFIX + "step.replayed"] is False
    (reserve_2,) = [s for s in find(worker, "step reserve") if child_of(s, retry)]
    assert reserve_2["attributes"][PREFIX + "step.replayed"] is True
    (charge,) = find(worker, "step charge")
    assert child_of(charge, retry)
    assert charge["attributes"][PREFIX + "step.replayed"] is False
