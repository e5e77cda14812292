"""Log lines name the job: the worker's records, and the two formatters.

What a user relies on: a failed attempt's line says which job (name, id,
run, attempt, queue) and what went wrong (code and message) in the console
format, and the opt-in JSON formatter carries the same with the trace id of
the job's traceparent. The records come from the real worker path
(``run_jobs()`` on PostgreSQL), not hand-made.
"""

from __future__ import annotations

import json
import logging

import pytest

from django_ultimate_jobs import Retry
from django_ultimate_jobs.logging import ConsoleFormatter, JSONFormatter, trace_ids
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.testing import run_jobs

pytestmark = pytest.mark.postgres

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
FORMAT = "%(levelname)s %(name)s: %(message)s"


@pytest.fixture
def declared(declare_jobs):
    return declare_jobs("logs", "t.logs")


class GatewayDown(Exception):
    code = "X_GATEWAY_DOWN"


def _failed_record(pg_driver, declared, caplog, *, traceparent: str | None = None):
    @declared(retry=Retry(attempts=2, delay="1h"))
    def charge(ctx):
        raise GatewayDown("the gateway said no\nx-forged: line")

    enqueued = charge.enqueue()
    if traceparent is not None:
        Job.objects.filter(id=enqueued.id).update(traceparent=traceparent)
    with caplog.at_level(logging.WARNING, logger="django_ultimate_jobs"):
        (execution,) = run_jobs(queues=["logs"], driver=pg_driver)
    assert execution.outcome == "retried"
    (record,) = [r for r in caplog.records if r.msg == "jobs.attempt.failed"]
    return enqueued, record


def test_a_failed_attempt_names_the_job_and_the_error_in_the_console(
    pg_driver, declared, caplog
):
    """``WARNING django_ultimate_jobs: jobs.attempt.failed`` was all it said."""
    enqueued, record = _failed_record(pg_driver, declared, caplog)
    line = ConsoleFormatter(FORMAT).format(record)
    assert line.startswith(
        "WARNING django_ultimate_jobs: jobs.attempt.failed job=t.logs.charge "
        f"job_id={enqueued.id} run_id={enqueued.run_id} attempt=1 queue=logs "
        "outcome=retried code=X_GATEWAY_DOWN "
        'error="GatewayDown: the gateway said no"'
    ), line
    # One line: a stored message cannot forge a second one.
    assert "\n" not in line


def test_the_json_formatter_carries_the_ids_and_the_trace_id(
    pg_driver, declared, caplog
):
    enqueued, record = _failed_record(
        pg_driver, declared, caplog, traceparent=TRACEPARENT
    )
    entry = json.loads(JSONFormatter().format(record))
    assert entry["event"] == "jobs.attempt.failed"
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "django_ultimate_jobs"
    assert entry["job"] == "t.logs.charge"
    assert entry["job_id"] == str(enqueued.id)
    assert entry["run_id"] == str(enqueued.run_id)
    assert entry["attempt"] == 1
    assert entry["queue"] == "logs"
    assert entry["code"] == "X_GATEWAY_DOWN"
    assert entry["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert entry["span_id"] == "00f067aa0ba902b7"
    assert "traceparent" not in entry
    assert entry["time"].endswith("+00:00")


def test_ctx_logger_lines_carry_run_id_and_queue(pg_driver, declared, caplog):
    @declared()
    def talk(ctx):
        ctx.logger.info("charging")

    enqueued = talk.enqueue()
    with caplog.at_level(logging.INFO, logger="django_ultimate_jobs.job"):
        run_jobs(queues=["logs"], driver=pg_driver)
    (record,) = [r for r in caplog.records if r.msg == "charging"]
    entry = json.loads(JSONFormatter().format(record))
    assert entry["run_id"] == str(enqueued.run_id)
    assert entry["queue"] == "logs"
    assert entry["attempt"] == 1


@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473z-00f067aa0ba902b7-01",
        "00-4bf92f35-00f067aa0ba902b7-01",
    ],
)
def test_a_malformed_traceparent_gives_no_trace_id(traceparent):
    assert trace_ids(traceparent) is None
    record = logging.LogRecord("x", logging.INFO, "", 0, "event", (), None)
    record.traceparent = traceparent
    assert "trace_id" not in json.loads(JSONFormatter().format(record))


def test_console_values_are_quoted_escaped_and_cut():
    record = logging.LogRecord("x", logging.INFO, "", 0, "event", (), None)
    record.error = 'a "quoted"\x1b[31m\r\nforged=1'
    record.big = "y" * 1000
    record.nothing = None
    line = ConsoleFormatter("%(message)s").format(record)
    assert line.startswith('event error="a \\"quoted\\"\\x1b[31m\\r\\nforged=1"'), line
    assert "\x1b" not in line and "\n" not in line
    assert "nothing=" not in line
    assert len(line) < 400


def test_an_exception_keeps_its_traceback_after_the_details():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "x", logging.ERROR, "", 0, "jobs.worker.slot-failed", (), sys.exc_info()
        )
    record.job = "t.job"
    line = ConsoleFormatter("%(message)s").format(record)
    first, _, rest = line.partition("\n")
    assert first == "jobs.worker.slot-failed job=t.job"
    assert "ValueError: boom" in rest
    entry = json.loads(JSONFormatter().format(record))
    assert "ValueError: boom" in entry["exception"]
