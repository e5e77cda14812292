"""The fleet's queue gauges: read from storage at most once per interval.

Queue depths come from one statement over the job table (``driver.stats()``)
and the live workers from the registry (``driver.workers()``). Every worker
process and web process that is scraped serves them, so read naively a
fleet of ten workers scraped every 15 s would run ten such reads per
interval. Instead the answer is kept in one shared row
(:class:`~.models.MetricsSnapshot`, key ``queues``), and a scrape:

1. locks the row only if it is older than ``METRICS_INTERVAL``
   (``SELECT ... WHERE taken_at < now() - interval FOR UPDATE``). The first
   scraper after the interval gets it, reads the queues, writes the answer
   and ``reads + 1`` and commits. A scraper that arrives meanwhile waits on
   the row lock; PostgreSQL then checks the condition again against the row
   just written, finds it fresh and returns nothing, so it reads no queues;
2. otherwise reads the row (a primary-key lookup) and serves its answer,
   with its age (``ultimate_jobs_queue_snapshot_age_seconds``).

So the queues are read at most once per interval for the whole fleet, and
every scrape sees an answer at most one interval old. The row lives in the
jobs database (``ULTIMATE_JOBS["DATABASE"]``); a driver whose jobs live in
one process (the memory driver) has no fleet, and is read directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from ..conf import jobs_settings
from ..drivers import get_driver
from ..drivers.base import JobDriver
from .models import MetricsSnapshot

__all__ = ["SNAPSHOT_KEY", "QueueSnapshot", "queue_snapshot"]

SNAPSHOT_KEY = "queues"
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One read of the queues, as every scrape of the fleet serves it."""

    queues: list[dict[str, Any]]
    """Per queue: ``queue``, ``ready``, ``delayed``, ``running``,
    ``suspended``, ``failed``, ``dead`` and ``oldest_ready_ms`` (or None)."""
    workers: int
    """Live worker processes in the registry."""
    age_s: float
    """How old the read is (0 for the scrape that made it)."""


def queue_snapshot(
    *, driver: JobDriver | None = None, interval_ms: int | None = None
) -> QueueSnapshot:
    """The fleet's queue gauges, read from storage at most once per interval.

    See the module docstring for how the interval is shared.
    """
    driver = driver or get_driver()
    if interval_ms is None:
        interval_ms = jobs_settings().metrics_interval_ms
    if not driver.features.shared_across_processes:
        return _from_payload(_read(driver), age_s=0.0)
    alias = jobs_settings().database
    rows = MetricsSnapshot.objects.using(alias)
    for _ in range(2):
        with transaction.atomic(using=alias):
            stale = (
                rows.select_for_update()
                .filter(
                    key=SNAPSHOT_KEY,
                    taken_at__lt=Now() - timedelta(milliseconds=interval_ms),
                )
                .values_list("key", flat=True)
                .first()
            )
            if stale is not None:
                payload = _read(driver)
                rows.filter(key=SNAPSHOT_KEY).update(
                    payload=payload, taken_at=Now(), reads=F("reads") + 1
                )
                return _from_payload(payload, age_s=0.0)
        kept = (
            rows.filter(key=SNAPSHOT_KEY)
            .annotate(age=Now() - F("taken_at"))
            .values_list("payload", "age")
            .first()
        )
        if kept is not None:
            payload, age = kept
            return _from_payload(payload, age_s=max(0.0, age.total_seconds()))
        # The first scrape ever: make the row (as old as can be), then read.
        rows.bulk_create(
            [MetricsSnapshot(key=SNAPSHOT_KEY, taken_at=_NEVER)], ignore_conflicts=True
        )
    raise RuntimeError("the metrics snapshot row vanished twice")  # pragma: no cover


def _read(driver: JobDriver) -> dict[str, Any]:
    return {
        "queues": [asdict(entry) for entry in driver.stats()],
        "workers": len(driver.workers()),
    }


def _from_payload(payload: dict[str, Any], *, age_s: float) -> QueueSnapshot:
    return QueueSnapshot(
        queues=list(payload.get("queues", ())),
        workers=int(payload.get("workers", 0)),
        age_s=age_s,
    )
