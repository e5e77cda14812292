"""Bench jobs (autodiscovered like any app's jobs.py).

``bench.latency`` writes its start time into ``bench_latency``, a plain table
the throughput bench creates with raw SQL (no migration for the bench app).
"""

import os
import time

from django.db import connection

from django_ultimate_jobs import job

LATENCY_TABLE = "bench_latency"


@job(name="bench.noop")
def noop(ctx):
    return None


@job(name="bench.sleep5")
def sleep5(ctx):
    time.sleep(0.005)


@job(name="bench.latency")
def latency(ctx):
    started = time.time()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {LATENCY_TABLE} (job_id, started) VALUES (%s, %s)",
            [ctx.job_id, started],
        )


@job(name="bench.free5", queue="limits")
def free5(ctx, *, key: int):
    """bench.keyed5's body without the cap (bench/limits.py's reference)."""
    time.sleep(0.005)


if os.environ.get("BENCH_LIMIT_JOBS"):
    from . import limit_jobs  # noqa: F401


_REDIS: list = []


@job(name="bench.latency_redis")
def latency_redis(ctx):
    """bench.latency for bench/brokers.py: its start time into Redis
    (``BENCH_LATENCY_REDIS``, the bench's server), not into a table."""
    started = time.time()
    if not _REDIS:
        import redis

        _REDIS.append(redis.Redis.from_url(os.environ["BENCH_LATENCY_REDIS"]))
    _REDIS[0].hset("bench:ours:started", str(ctx.job_id), repr(started))


# -- bench/exports.py: an export and an import of jobsapp.ExportItem rows ----------


def _export_dir():
    import tempfile

    from django.core.files.storage import FileSystemStorage

    default = os.path.join(tempfile.gettempdir(), "uj-bench-exports")
    return FileSystemStorage(location=os.environ.get("BENCH_EXPORT_DIR", default))


from django_ultimate_jobs.exports import export_rows, import_rows  # noqa: E402
from tests.jobsapp.jobs import ITEM_FIELDS  # noqa: E402

export_rows(
    name="bench.rows",
    model="jobsapp.ExportItem",
    fields=ITEM_FIELDS,
    storage=_export_dir,
    format=os.environ.get("BENCH_EXPORT_FORMAT", "csv"),
)
import_rows(name="bench.rows", model="jobsapp.ExportItemCopy", storage=_export_dir)
