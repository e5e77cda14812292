"""Formatters for the app's log records: a human line and JSON.

Every record the app logs has a stable event name as its message
(``jobs.attempt.failed``) and its details as record attributes (``job``,
``job_id``, ``attempt``, ``code``, ``error``...; docs/reference/logging.md).
A plain ``%(message)s`` format shows only the event name; these formatters
show the details too:

- :class:`ConsoleFormatter`: the usual format, then the details as
  ``key=value`` pairs, the job's first
  (``WARNING django_ultimate_jobs: jobs.attempt.failed job=shop.send_receipt
  job_id=... attempt=2 queue=default outcome=retried code=X_JOB_TIMEOUT
  error="..."``);
- :class:`JSONFormatter`: one JSON object per line with the event, the
  level, the logger, the job's ids (``job_id``, ``run_id``, ``attempt``,
  ``queue``), the ``trace_id`` and ``span_id`` of the current
  OpenTelemetry span or else read from the job's ``traceparent``, and every
  other detail.

Both read the details off the record: they work for your own loggers too.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from django_ultimate_jobs.terminal import escape_json, printable

__all__ = [
    "CONSOLE_FORMAT",
    "ConsoleFormatter",
    "JSONFormatter",
    "console_by_default",
    "record_details",
    "trace_ids",
]

CONSOLE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The format of the console handler ``runjobs`` installs by default."""

_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()
    | {"message", "asctime", "taskName"}
)
"""The attributes every LogRecord has: anything else came with ``extra=``."""

_FIRST = ("job", "job_id", "run_id", "attempt", "queue", "outcome", "code", "error")
"""Details shown first, in this order (the job, then what went wrong)."""

TRACEBACK_INDENT = "    "
"""Put before each line of a traceback in the console (only records start at column 0)."""

MAX_VALUE = 300
"""A detail longer than this is cut (with an ellipsis) in the console line."""


def record_details(record: logging.LogRecord) -> dict[str, Any]:
    """The record's details (its ``extra=`` attributes), the job's first."""
    extra = {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD and not key.startswith("_")
    }
    ordered = {key: extra.pop(key) for key in _FIRST if key in extra}
    ordered.update(sorted(extra.items()))
    return ordered


def trace_ids(traceparent: Any) -> tuple[str, str] | None:
    """``(trace_id, span_id)`` from a W3C ``traceparent``, or None when malformed."""
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    trace_id, span_id = parts[1].lower(), parts[2].lower()
    hexdigits = set("0123456789abcdef")
    if not set(trace_id + span_id) <= hexdigits or set(trace_id) == {"0"}:
        return None
    return trace_id, span_id


class ConsoleFormatter(logging.Formatter):
    """The configured format, then the record's details as ``key=value``.

    Use it where you use ``logging.Formatter`` (same arguments)::

        "formatters": {"jobs": {
            "()": "django_ultimate_jobs.logging.ConsoleFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        }}

    ``traceparent`` is left out (the JSON formatter carries the trace id).
    Values are printed with their control characters escaped, so a stored
    error cannot forge a log line.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record`` as the base formatter does, with its details.

        The line is terminal-safe whatever the record holds: the message,
        the detail keys and values have their control characters escaped,
        and each line of a traceback or stack is indented (a newline in an
        exception message cannot put a forged record at column 0).
        """
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        pairs = [
            f"{_show(key)}={_show(value)}"
            for key, value in record_details(record).items()
            if key != "traceparent" and value is not None
        ]
        head = " ".join([printable(self.formatMessage(record)), *pairs])
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        after = [record.exc_text or ""]
        if record.stack_info:
            after.append(self.formatStack(record.stack_info))
        lines = [
            TRACEBACK_INDENT + printable(line)
            for text in after
            if text
            for line in text.split("\n")
        ]
        return "\n".join([head, *lines])


def console_by_default(stream: TextIO | None = None) -> logging.Handler | None:
    """Human lines for the app's logger, unless the project routed it.

    ``runjobs`` calls it at start: when neither ``django_ultimate_jobs`` nor
    a logger it propagates to has a handler (a project without ``LOGGING``
    for it: Django's defaults configure only the ``django`` loggers), the
    records would reach Python's last-resort handler, which prints the bare
    event name. This adds a handler on ``stream`` (stderr) with a
    :class:`ConsoleFormatter`, so each line names the job and the error.
    The logger's level is left as it is (``WARNING`` unless set). Answers
    the handler, or ``None`` when the project's configuration wins.
    """
    jobs = logging.getLogger("django_ultimate_jobs")
    node: logging.Logger | None = jobs
    while node is not None:
        if node.handlers:
            return None
        if not node.propagate:
            break
        node = node.parent
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(ConsoleFormatter(CONSOLE_FORMAT))
    jobs.addHandler(handler)
    return handler


class JSONFormatter(logging.Formatter):
    """One JSON object per record (opt-in: name it in ``LOGGING``).

    Keys: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``event`` (the
    message, an event name for the app's records), then the record's details
    (``job``, ``job_id``, ``run_id``, ``attempt``, ``queue``... as logged),
    ``trace_id`` and ``span_id`` (of the OpenTelemetry span current in the
    thread, else of the record's ``traceparent``), and ``exception`` (the
    formatted traceback) when there is one. A value JSON cannot hold is
    written as its ``str()``; NaN and the infinities as the strings
    ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (strict parsers refuse them
    bare). Control characters, the line separators, bidirectional overrides
    and lone surrogates are escaped (``\\u001b``, ``\\u2028``): the line is
    valid UTF-8 and terminal-safe.
    """

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one line of JSON."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        details = record_details(record)
        ids = current_span_ids() or trace_ids(details.pop("traceparent", None))
        details.pop("traceparent", None)
        entry.update(details)
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return escape_json(json.dumps(_finite(entry), default=str, ensure_ascii=False))


def current_span_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the OpenTelemetry span current in this thread.

    None when there is none, and when ``opentelemetry`` was never imported
    (tracing off): it is not imported here.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def _finite(value: Any) -> Any:
    """``value`` with NaN and the infinities as the strings JavaScript writes."""
    if isinstance(value, float) and not math.isfinite(value):
        return (
            "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        )
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > MAX_VALUE:
        text = text[: MAX_VALUE - 1] + "…"
    escaped = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
        for c in text.replace("\\", "\\\\")
    )
    if escaped != text or not text or any(c in text for c in ' "='):
        return '"' + escaped.replace('"', '\\"') + '"'
    return text
