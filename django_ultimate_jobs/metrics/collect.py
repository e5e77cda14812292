"""The collectors: what a scrape of a worker or of the view answers.

Imports ``prometheus_client``: imported only when metrics are turned on.

- :class:`FleetCollector` reads the fleet's queue gauges (:mod:`.snapshot`);
- :class:`ProcessMetrics` keeps this worker process's counters and
  histograms, fed by the ``job_started`` / ``job_finished`` signals, and
  reads its slots, lost leases and database outages from the worker at
  scrape time (nothing is counted twice, nothing costs between scrapes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django.db import connections
from prometheus_client import Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from ..drivers.base import ClaimedJob
from ..signals import job_finished, job_started
from .names import METRICS, PREFIX
from .snapshot import QueueSnapshot, queue_snapshot

if TYPE_CHECKING:
    from ..worker.runner import Worker

__all__ = ["DURATION_BUCKETS", "PICKUP_BUCKETS", "FleetCollector", "ProcessMetrics"]

logger = logging.getLogger("django_ultimate_jobs")

DEPTH_STATES = ("ready", "delayed", "running", "suspended", "failed", "dead")
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
"""Attempt durations (seconds): a no-op job to a five-minute report."""
PICKUP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Pickup latency (seconds): a woken worker to a backlog an hour deep."""

_HELP = {metric.name: metric.help for metric in METRICS}
_UNTIMED = frozenset(("lost", "interrupted", "refused"))
"""Outcomes whose body did not run to an end this process can time."""


class FleetCollector(Collector):
    """The queue gauges, from the fleet's shared snapshot (one read per interval).

    ``close_connections``: close this thread's database connections after
    each scrape (the metrics server answers each scrape in a new thread).
    ``reachable``: asked first; False skips the read (a worker that knows
    the database is away answers at once, without a connection attempt per
    scrape, and says so with ``database_up 0``).
    """

    def __init__(
        self,
        read: Callable[[], QueueSnapshot] = queue_snapshot,
        *,
        close_connections: bool = False,
        reachable: Callable[[], bool] | None = None,
    ) -> None:
        self._read = read
        self._close = close_connections
        self._reachable = reachable

    def collect(self) -> Iterator[Metric]:
        """Yield the fleet gauges (none when storage cannot be read now)."""
        if self._reachable is not None and not self._reachable():
            return
        try:
            snapshot = self._read()
        except Exception:
            # The process's own metrics still answer (database_up says why).
            logger.debug("jobs.metrics.snapshot-failed", exc_info=True)
            return
        finally:
            if self._close:
                connections.close_all()
        yield from fleet_families(snapshot)


def fleet_families(snapshot: QueueSnapshot) -> Iterator[Metric]:
    """The fleet gauges of one snapshot, as metric families."""
    depth = _gauge("queue_depth", ["queue", "state"])
    oldest = _gauge("queue_oldest_ready_seconds", ["queue"])
    dead = _gauge("queue_dead_jobs", ["queue"])
    for entry in snapshot.queues:
        queue = entry["queue"]
        for state in DEPTH_STATES:
            depth.add_metric([queue, state], entry.get(state, 0))
        oldest.add_metric([queue], (entry.get("oldest_ready_ms") or 0) / 1000)
        dead.add_metric([queue], entry.get("dead", 0))
    workers = _gauge("workers_alive", [])
    workers.add_metric([], snapshot.workers)
    age = _gauge("queue_snapshot_age_seconds", [])
    age.add_metric([], snapshot.age_s)
    yield from (depth, oldest, dead, workers, age)


class ProcessMetrics:
    """One worker process's metrics, in ``registry``.

    Call :meth:`connect` to start counting and :meth:`disconnect` at stop.
    """

    def __init__(self, worker: Worker, registry: CollectorRegistry) -> None:
        self._worker = worker
        self.jobs = Counter(
            f"{PREFIX}jobs",
            _HELP[f"{PREFIX}jobs_total"],
            ["name", "queue", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            f"{PREFIX}attempt_duration_seconds",
            _HELP[f"{PREFIX}attempt_duration_seconds"],
            ["name", "queue"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.pickup = Histogram(
            f"{PREFIX}pickup_latency_seconds",
            _HELP[f"{PREFIX}pickup_latency_seconds"],
            ["queue"],
            buckets=PICKUP_BUCKETS,
            registry=registry,
        )
        registry.register(_WorkerState(worker))

    def connect(self) -> None:
        """Receive every job's ``job_started`` and ``job_finished``."""
        job_started.connect(self.started, weak=False, dispatch_uid=self._uid)
        job_finished.connect(self.finished, weak=False, dispatch_uid=self._uid)

    def disconnect(self) -> None:
        """Stop receiving the signals."""
        job_started.disconnect(dispatch_uid=self._uid)
        job_finished.disconnect(dispatch_uid=self._uid)

    @property
    def _uid(self) -> str:
        return f"ultimate_jobs.metrics.{id(self)}"

    def started(self, sender: Any, claimed: ClaimedJob, **kwargs: Any) -> None:
        """``job_started``: observe the pickup latency of a fresh claim."""
        # A re-taken lapsed lease was due long ago: its wait is the lapse,
        # not a pickup.
        if claimed.retaken or claimed.run_at is None or claimed.claimed_at is None:
            return
        waited = (claimed.claimed_at - claimed.run_at).total_seconds()
        self.pickup.labels(claimed.queue).observe(max(0.0, waited))

    def finished(
        self,
        sender: Any,
        claimed: ClaimedJob,
        outcome: str,
        landed: bool | None,
        duration_ms: int | None = None,
        **kwargs: Any,
    ) -> None:
        """``job_finished``: count the outcome that was written, time the body."""
        # A settle that did not land wrote nothing: the row was no longer
        # this worker's, so the outcome did not happen.
        written = outcome if landed or outcome == "lost" else "lost"
        self.jobs.labels(claimed.name, claimed.queue, written).inc()
        if duration_ms is not None and outcome not in _UNTIMED:
            self.duration.labels(claimed.name, claimed.queue).observe(
                duration_ms / 1000
            )


class _WorkerState(Collector):
    """Read at scrape time from the worker: slots, lost leases, outages."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        worker = self._worker
        busy = _gauge("worker_slots_busy", [])
        busy.add_metric([], worker.slots_busy)
        slots = _gauge("worker_slots", [])
        slots.add_metric([], worker.config.concurrency)
        lost = _counter("job_leases_lost_total")
        lost.add_metric([], worker.leases_lost)
        outages = _counter("database_outages_total")
        outages.add_metric([], worker.outage.outages)
        up = _gauge("database_up", [])
        up.add_metric([], 0 if worker.outage.down else 1)
        yield from (busy, slots, lost, outages, up)


def _gauge(short: str, labels: list[str]) -> GaugeMetricFamily:
    name = PREFIX + short
    return GaugeMetricFamily(name, _HELP[name], labels=labels)


def _counter(short: str) -> CounterMetricFamily:
    name = PREFIX + short
    return CounterMetricFamily(name.removesuffix("_total"), _HELP[name], labels=[])
