"""The built-in maintenance jobs: ``ultimate_jobs.retention`` and ``ultimate_jobs.partitions``.

Imported by ``AppConfig.ready()``, so every worker knows them, with the
cron tasks that schedule them: retention hourly at minute 23 (upstream's
``DEFAULT_PURGE_CRON``), partitions daily at 03:17 UTC. A scheduler that was
down runs each once on its return (``catch_up="run-once"``). Each job holds a
fixed idempotency key: one live run at a time when enqueued by hand. The
first step reads the clock once; every later step (one per target, one per
partitioned table) is durable, so an attempt that dies mid-way resumes at
the target it stopped on, with the same clock.

Both go to their own queue (``HOUSEKEEPING_QUEUE``, default
``ultimate_jobs``), which every ``runjobs`` serves besides its own queues:
a wait for "queue drained" on an app's queue never sees them.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ..conf import jobs_settings
from ..context import JobContext
from ..crontask import task
from ..jobs import job
from .instant import maintenance_now, parse_instant
from .partitions import maintain_partitions, registered_partitions
from .retention import TARGETS, sweep_target

__all__ = [
    "PARTITIONS_CRON",
    "PARTITIONS_JOB",
    "RETENTION_CRON",
    "RETENTION_JOB",
    "housekeeping_queue",
    "partitions",
    "retention",
]

logger = logging.getLogger("django_ultimate_jobs")

RETENTION_JOB = "ultimate_jobs.retention"
PARTITIONS_JOB = "ultimate_jobs.partitions"
RETENTION_CRON = "23 * * * *"
PARTITIONS_CRON = "17 3 * * *"


def housekeeping_queue() -> str:
    """The built-in jobs' queue: ``HOUSEKEEPING_QUEUE``, read at each enqueue."""
    return jobs_settings().housekeeping_queue


def _read_clock() -> str:
    return maintenance_now().isoformat()


@job(
    name=RETENTION_JOB,
    queue=housekeeping_queue,
    idempotency_key=lambda _input: "retention",
)
def retention(ctx: JobContext) -> dict[str, int]:
    """Sweep every retention target as of one clock reading, one step each."""
    now = datetime.fromisoformat(ctx.step.run("clock", _read_clock))
    report: dict[str, int] = {}
    for target in TARGETS:
        counts: dict[str, int] = ctx.step.run(target, sweep_target, target, now)
        for key, count in counts.items():
            report[key] = report.get(key, 0) + count
    if any(report.values()):
        logger.info("jobs.retention.swept", extra={"removed": report})
    return report


@job(
    name=PARTITIONS_JOB,
    queue=housekeeping_queue,
    idempotency_key=lambda _input: "partitions",
)
def partitions(
    ctx: JobContext, *, backfill_from: str | None = None
) -> dict[str, dict[str, list[str]]]:
    """Maintain every ``partitioned(...)`` table, one step each.

    Args:
        backfill_from: an ISO instant; also create every partition back to
            it and drop nothing (enqueue it once before copying old rows).
    """
    now = datetime.fromisoformat(ctx.step.run("clock", _read_clock))
    since = parse_instant(backfill_from) if backfill_from else None
    return {
        spec.table: ctx.step.run(spec.table, _maintain_one, spec.table, now, since)
        for spec in registered_partitions()
    }


def _maintain_one(
    table: str, now: datetime, since: datetime | None
) -> dict[str, list[str]]:
    # Declarations are read per attempt: one added by a deploy is
    # maintained from the next run.
    specs = [spec for spec in registered_partitions() if spec.table == table]
    plans = maintain_partitions(now, backfill_from=since, specs=specs)
    return {
        "created": [p.name for plan in plans for p in plan.create],
        "dropped": [p.name for plan in plans for p in plan.drop],
    }


task(
    name=RETENTION_JOB,
    cron=RETENTION_CRON,
    tz="UTC",
    job=retention,
    catch_up="run-once",
)
task(
    name=PARTITIONS_JOB,
    cron=PARTITIONS_CRON,
    tz="UTC",
    job=partitions,
    catch_up="run-once",
)
