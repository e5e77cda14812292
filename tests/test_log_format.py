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


def test_ctx_logger_keeps_the_callers_extra(pg_driver, declared, caplog):
    """The job's fields are added to ``extra=``, not put in its place."""

    @declared()
    def talk(ctx):
        ctx.logger.warning("user.plain", extra={"order_id": 42, "job": "forged"})

    enqueued = talk.enqueue()
    with caplog.at_level(logging.INFO, logger="django_ultimate_jobs.job"):
        run_jobs(queues=["logs"], driver=pg_driver)
    (record,) = [r for r in caplog.records if r.msg == "user.plain"]
    entry = json.loads(JSONFormatter().format(record))
    assert entry["order_id"] == 42
    assert entry["job"] == "t.logs.talk"
    assert entry["job_id"] == str(enqueued.id)
    line = ConsoleFormatter(FORMAT).format(record)
    assert "order_id=42" in line and f"job_id={enqueued.id}" in line


def _record(msg: str = "event", exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("x", logging.ERROR, "", 0, msg, (), exc_info)


def _raised(message: str):
    import sys

    try:
        raise ValueError(message)
    except ValueError:
        return sys.exc_info()


HOSTILE = "a\x1b[31m\x9b\x85\u2028\u2029\u202e\x7f\udcff z"


def test_the_json_line_escapes_controls_and_lone_surrogates():
    record = _record()
    record.error = HOSTILE
    line = JSONFormatter().format(record)
    line.encode("utf-8")  # a lone surrogate raised UnicodeEncodeError here
    for raw in "\x1b\x9b\x85\u2028\u2029\u202e\x7f\udcff":
        assert raw not in line, repr(raw)
    assert "\\u009b" in line and "\\u202e" in line and "\\udcff" in line
    assert json.loads(line)["error"] == HOSTILE


def test_the_json_line_writes_nan_and_infinity_as_strings():
    record = _record()
    record.ratio = float("nan")
    record.limits = {"up": float("inf"), "down": [float("-inf"), 1.5]}
    line = JSONFormatter().format(record)
    entry = json.loads(line, parse_constant=lambda bare: pytest.fail(bare))
    assert entry["ratio"] == "NaN"
    assert entry["limits"] == {"up": "Infinity", "down": ["-Infinity", 1.5]}


def test_the_console_record_is_terminal_safe_traceback_and_keys_too():
    record = _record(
        "jobs.on-settled.failed",
        _raised("boom\x1b]0;owned\x07\nERROR django_ultimate_jobs: forged"),
    )
    record.__dict__["a b=c\nd"] = 1
    record.note = "\udcff"
    line = ConsoleFormatter(FORMAT).format(record)
    line.encode("utf-8")
    assert "\x1b" not in line and "\x07" not in line
    head, *rest = line.split("\n")
    assert head.startswith("ERROR x: jobs.on-settled.failed ")
    assert '"a b=c\\nd"=1' in head and 'note="\\udcff"' in head
    # Every traceback line is indented: nothing forged at column 0.
    assert rest and all(part.startswith("    ") for part in rest), rest
    assert any("ValueError: boom\\x1b]0;owned\\x07" in part for part in rest)


def test_the_json_trace_id_is_the_current_spans_when_there_is_one():
    trace = pytest.importorskip("opentelemetry.trace")
    from opentelemetry.sdk.trace import TracerProvider

    record = _record()
    record.traceparent = TRACEPARENT
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("attempt") as span:
        entry = json.loads(JSONFormatter().format(record))
    context = span.get_span_context()
    assert entry["trace_id"] == f"{context.trace_id:032x}"
    assert entry["span_id"] == f"{context.span_id:016x}"
    assert trace.get_current_span().get_span_context().is_valid is False
    entry = json.loads(JSONFormatter().format(record))
    assert entry["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
