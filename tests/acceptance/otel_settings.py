"""Settings of a traced ``runjobs``: the worker settings plus an SDK provider.

Configuring the provider here, before Django starts, is what a project does
(in settings.py or wsgi.py): tracing's ``"auto"`` finds it at first use.
Every span is appended to ``UJ_SPANS_FILE`` as it ends
(tests/support/spans.py), where tests/acceptance/test_traces.py reads it.
"""

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.acceptance.worker_settings import *  # noqa: F403
from tests.support.spans import JsonLinesExporter

_provider = TracerProvider()
_provider.add_span_processor(
    SimpleSpanProcessor(JsonLinesExporter(os.environ["UJ_SPANS_FILE"]))
)
trace.set_tracer_provider(_provider)
