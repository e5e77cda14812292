"""Run by tests/test_tracing_imports.py in a fresh interpreter.

Enqueues and runs a job (memory driver), then prints as JSON which
OpenTelemetry modules the process has loaded, how many spans were exported
and the error code, if any. ``argv[1]``:

- ``plain``: nothing configured (the extra is installed in the dev venv);
- ``missing``: OpenTelemetry made unimportable first, as without the extra
  (``sys.modules[name] = None`` is how Python spells "no such module");
- ``provider``: a global SDK provider configured before Django starts, as a
  project's settings or wsgi.py does.

``UJ_TRACING`` (JSON) sets ``ULTIMATE_JOBS["TRACING"]``.
"""

import json
import os
import sys

mode = sys.argv[1]
exporter = None
if mode == "missing":
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]
elif mode == "provider":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import django  # noqa: E402

django.setup()

from django.test.utils import override_settings  # noqa: E402

from django_ultimate_jobs.errors import JobsError  # noqa: E402
from django_ultimate_jobs.testing import run_jobs  # noqa: E402
from tests.jobsapp.jobs import traced_steps  # noqa: E402

jobs_settings = {"DRIVER": "memory", "QUEUES": ["default"]}
if "UJ_TRACING" in os.environ:
    jobs_settings["TRACING"] = json.loads(os.environ["UJ_TRACING"])
error = None
outcomes = []
with override_settings(ULTIMATE_JOBS=jobs_settings):
    try:
        traced_steps.enqueue(order="probe")
        outcomes = [e.outcome for e in run_jobs(queues=["default"])]
    except JobsError as refused:
        error = refused.code
print(
    json.dumps(
        {
            "modules": sorted(
                name
                for name, module in sys.modules.items()
                if name.split(".")[0] == "opentelemetry" and module is not None
            ),
            "spans_module": "django_ultimate_jobs.tracing.spans" in sys.modules,
            "spans": None if exporter is None else len(exporter.get_finished_spans()),
            "outcomes": outcomes,
            "error": error,
        }
    )
)
