"""The collectors: what a scrape of a worker or of the view answers.

Imports ``prometheus_client``: imported only when metrics are turned on.

- :class:`FleetCollector` reads the fleet's queue gauges (:mod:`.snapshot`);
- :class:`ProcessMetrics` keeps this worker process's counters and
  histograms, told of each attempt by the worker (``Worker.watchers``), and
  reads its slots, lost leases and database outages from the worker at
  scrape time (nothing is counted twice, nothing costs between scrapes).
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connections
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from ..drivers.base import ClaimedJob
from .names import METRICS, PREFIX
from .snapshot import QueueSnapshot, queue_snapshot

if TYPE_CHECKING:
    from ..worker.executor import Execution
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

    The worker tells it of each attempt directly (``Worker.watchers``: a
    signal's dispatch would cost more than the counting), from the slot
    threads and the settle loop, so what it does is kept small: under one
    lock, a dict entry's count goes up (a histogram's bucket found by
    ``bisect``); the metric families are built from those numbers at scrape
    time (:class:`_Tallies`). ``prometheus_client``'s own labelled children
    cost several times that per observation (label checks, a lock per value).
    """

    def __init__(self, worker: Worker, registry: CollectorRegistry) -> None:
        self._worker = worker
        self._tallies = _Tallies()
        registry.register(self._tallies)
        registry.register(_WorkerState(worker))

    def connect(self) -> None:
        """Be told of every attempt of the worker."""
        self._worker.watchers.watch(started=self.started, finished=self.finished)

    def disconnect(self) -> None:
        """Stop being told."""
        self._worker.watchers.unwatch(started=self.started, finished=self.finished)

    def started(self, claimed: ClaimedJob) -> None:
        """An attempt starts: observe the pickup latency of a fresh claim."""
        # A re-taken lapsed lease was due long ago: its wait is the lapse,
        # not a pickup.
        if claimed.retaken or claimed.run_at is None or claimed.claimed_at is None:
            return
        waited = (claimed.claimed_at - claimed.run_at).total_seconds()
        self._tallies.pickup.observe((claimed.queue,), max(0.0, waited))

    def finished(self, execution: Execution) -> None:
        """An attempt ended: count the outcome that was written, time the body."""
        # A settle that did not land wrote nothing: the row was no longer
        # this worker's, so the outcome did not happen.
        outcome, claimed = execution.outcome, execution.claimed
        written = outcome if execution.landed or outcome == "lost" else "lost"
        tallies = self._tallies
        tallies.jobs.inc((claimed.name, claimed.queue, written))
        duration_ms = execution.duration_ms
        if duration_ms is not None and written not in _UNTIMED:
            tallies.duration.observe((claimed.name, claimed.queue), duration_ms / 1000)


class _Count:
    """A counter by label values: a number per key, and when it first moved."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.values: dict[tuple[str, ...], list[float]] = {}  # key: [count, created]

    def inc(self, key: tuple[str, ...]) -> None:
        with self._lock:
            entry = self.values.get(key)
            if entry is None:
                self.values[key] = [1, time.time()]
            else:
                entry[0] += 1


class _Histogram:
    """A histogram by label values: per key its bucket counts (not
    cumulative; the last is ``+Inf``), sum and creation time."""

    def __init__(self, lock: threading.Lock, bounds: Sequence[float]) -> None:
        self._lock = lock
        self.bounds = tuple(float(bound) for bound in bounds)
        self.values: dict[tuple[str, ...], list[Any]] = {}  # [counts, sum, created]

    def observe(self, key: tuple[str, ...], amount: float) -> None:
        index = bisect_left(self.bounds, amount)  # le: a value on a bound counts in it
        with self._lock:
            entry = self.values.get(key)
            if entry is None:
                entry = self.values[key] = [
                    [0] * (len(self.bounds) + 1),
                    0.0,
                    time.time(),
                ]
            entry[0][index] += 1
            entry[1] += amount


class _Tallies(Collector):
    """The process's counters and histograms, as families at scrape time.

    The exposition is what ``prometheus_client``'s ``Counter`` and
    ``Histogram`` would give: ``_total`` and ``_created`` samples,
    cumulative ``_bucket`` samples up to ``+Inf``, ``_count`` and ``_sum``.
    """

    def __init__(self) -> None:
        lock = threading.Lock()
        self._lock = lock
        self.jobs = _Count(lock)
        self.duration = _Histogram(lock, DURATION_BUCKETS)
        self.pickup = _Histogram(lock, PICKUP_BUCKETS)

    def collect(self) -> Iterator[Metric]:
        """Yield the counter and the two histograms (copies taken under the lock)."""
        with self._lock:
            jobs = {key: list(entry) for key, entry in self.jobs.values.items()}
            duration = _copy(self.duration.values)
            pickup = _copy(self.pickup.values)
        name = f"{PREFIX}jobs_total"
        family = CounterMetricFamily(
            name.removesuffix("_total"),
            _HELP[name],
            labels=["name", "queue", "outcome"],
        )
        for key, (count, created) in jobs.items():
            family.add_metric(list(key), count, created=created)
        yield family
        yield _histogram_family(
            "attempt_duration_seconds",
            ["name", "queue"],
            self.duration.bounds,
            duration,
        )
        yield _histogram_family(
            "pickup_latency_seconds", ["queue"], self.pickup.bounds, pickup
        )


def _copy(values: dict[tuple[str, ...], list[Any]]) -> dict[tuple[str, ...], list[Any]]:
    return {
        key: [list(counts), total, created]
        for key, (counts, total, created) in values.items()
    }


def _histogram_family(
    short: str,
    labels: list[str],
    bounds: tuple[float, ...],
    values: dict[tuple[str, ...], list[Any]],
) -> HistogramMetricFamily:
    name = PREFIX + short
    family = HistogramMetricFamily(name, _HELP[name], labels=labels)
    edges = [*(floatToGoString(bound) for bound in bounds), "+Inf"]
    for key, (counts, total, created) in values.items():
        buckets = []
        running = 0
        for edge, count in zip(edges, counts, strict=True):
            running += count
            buckets.append((edge, running))
        family.add_metric(list(key), buckets, total)
        family.add_sample(
            f"{name}_created", dict(zip(labels, key, strict=True)), created
        )
    return family


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
