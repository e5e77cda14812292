"""Settings for the benches: the test settings plus the bench jobs app.

DATABASE_URL (read by tests.settings) must point at the bench database;
bench/throughput.py and bench/idle.py set it for the workers they start.
"""

import os

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchjobs"]  # noqa: F405

# bench/brokers.py runs our workers on the Redis driver with these.
if _redis_url := os.environ.get("BENCH_REDIS_URL"):
    ULTIMATE_JOBS = {
        **ULTIMATE_JOBS,  # noqa: F405
        "DRIVER": "redis",
        "REDIS_URL": _redis_url,
        "REDIS_PREFIX": os.environ.get("BENCH_REDIS_PREFIX", "bench"),
    }

# bench/throughput.py's BENCH_TP_TRACING=1: every process (the bench's own,
# which enqueues, and each worker) records every span through the SDK's batch
# processor into an exporter that drops them, so the figures are the cost of
# making the spans, not of shipping them.
if os.environ.get("BENCH_TP_TRACING") == "1":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class _Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    # BENCH_TP_TRACE_RATIO below 1: that share of the traces sampled.
    _ratio = float(os.environ.get("BENCH_TP_TRACE_RATIO", "1"))
    _provider = (
        TracerProvider(sampler=ParentBased(TraceIdRatioBased(_ratio)))
        if _ratio < 1
        else TracerProvider()
    )
    _provider.add_span_processor(BatchSpanProcessor(_Discard()))
    trace.set_tracer_provider(_provider)
# bench/throughput.py with BENCH_TP_METRICS=1: the fleet's queue snapshot is
# read again once per scrape interval (METRICS_INTERVAL set to it).
if _metrics_interval := os.environ.get("UJ_BENCH_METRICS_INTERVAL"):
    ULTIMATE_JOBS = {**ULTIMATE_JOBS, "METRICS_INTERVAL": _metrics_interval}
