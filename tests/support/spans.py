"""Finished OpenTelemetry spans as plain dicts, in memory or through a file.

The tests read spans of two origins the same way: the test process's own
(the SDK's ``InMemorySpanExporter``) and a ``runjobs`` subprocess's, which
its settings (tests/acceptance/otel_settings.py) hand to
:class:`JsonLinesExporter`: one JSON object per line, appended as each span
ends, read back with :func:`read_spans` while the worker runs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

__all__ = [
    "PREFIX",
    "JsonLinesExporter",
    "Recorder",
    "child_of",
    "find",
    "one",
    "read_spans",
    "record_of",
    "traceparent",
]

PREFIX = "messaging.django_ultimate_jobs."
"""The package's own span attributes (``messaging.{system}.*``)."""


def record_of(span: ReadableSpan) -> dict[str, Any]:
    """What the tests check of a span: ids in hex, kind and status by name."""
    context = span.context
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "flags": f"{context.trace_flags:02x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "parent_trace_id": f"{parent.trace_id:032x}" if parent else None,
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
            }
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "status_description": span.status.description,
        "events": [event.name for event in span.events],
    }


def traceparent(record: dict[str, Any]) -> str:
    """The W3C ``traceparent`` naming ``record``'s span."""
    return f"00-{record['trace_id']}-{record['span_id']}-{record['flags']}"


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to ``path`` as one JSON line."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        text = "".join(
            json.dumps(record_of(span), default=str) + "\n" for span in spans
        )
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(text)
        return SpanExportResult.SUCCESS


def read_spans(path: str | Path) -> list[dict[str, Any]]:
    """The spans written to ``path`` so far (a line being written is skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # the worker is still writing it
    return records


class Recorder:
    """An SDK provider whose finished spans are kept in memory, as records."""

    def __init__(self) -> None:
        self.provider = TracerProvider()
        self.exporter = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[dict[str, Any]]:
        """Every span finished so far, in the order they ended."""
        return [record_of(span) for span in self.exporter.get_finished_spans()]

    def tracer(self) -> Any:
        """A tracer of this provider, for the tests' own spans."""
        return self.provider.get_tracer("tests")


def find(
    records: Iterable[dict[str, Any]], name: str, **attributes: Any
) -> list[dict[str, Any]]:
    """The records named ``name`` whose attributes include ``attributes``.

    Keys name this package's own attributes without their prefix, ``.``
    written ``__``: ``job__attempt=2`` is ``messaging.django_ultimate_jobs.job.attempt``.
    """
    wanted = {
        PREFIX + key.replace("__", "."): value for key, value in attributes.items()
    }
    return [
        r
        for r in records
        if r["name"] == name
        and all(r["attributes"].get(k) == v for k, v in wanted.items())
    ]


def one(records: Iterable[dict[str, Any]], name: str, **attributes: Any) -> dict:
    """The only record :func:`find` answers (fails the test otherwise)."""
    found = find(records, name, **attributes)
    assert len(found) == 1, (name, attributes, records)
    return found[0]


def child_of(span: dict[str, Any], parent: dict[str, Any]) -> bool:
    """Whether ``span``'s parent is ``parent`` (same trace, its span id)."""
    return (span["parent_trace_id"], span["parent_span_id"]) == (
        parent["trace_id"],
        parent["span_id"],
    )
