"""Every metric this package exposes: name, type, labels and help text.

One table, read by the collectors (:mod:`.collect`), the monitoring how-to
and the tests that check the Grafana dashboard names only metrics that
exist. Names follow Prometheus' rules: one prefix, base units
(``_seconds``), ``_total`` on counters.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METRICS", "PREFIX", "MetricName"]

PREFIX = "ultimate_jobs_"
"""The prefix of every metric name."""


@dataclass(frozen=True, slots=True)
class MetricName:
    """One metric: its exposed name, type, labels, source and help text."""

    name: str
    kind: str
    """``counter``, ``gauge`` or ``histogram``."""
    labels: tuple[str, ...]
    source: str
    """``fleet`` (read from the database, served by workers and the view) or
    ``process`` (this worker process's own, served by ``runjobs`` only)."""
    help: str

    @property
    def family(self) -> str:
        """The name ``prometheus_client`` gives the family (``_total`` dropped)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


METRICS: tuple[MetricName, ...] = (
    MetricName(
        f"{PREFIX}queue_depth",
        "gauge",
        ("queue", "state"),
        "fleet",
        "Jobs per queue and state (ready: due now; delayed: not yet due; "
        "running, suspended, failed, dead).",
    ),
    MetricName(
        f"{PREFIX}queue_oldest_ready_seconds",
        "gauge",
        ("queue",),
        "fleet",
        "Age of the queue's oldest due job not yet claimed (0 when none).",
    ),
    MetricName(
        f"{PREFIX}queue_dead_jobs",
        "gauge",
        ("queue",),
        "fleet",
        "Dead-lettered jobs in the queue.",
    ),
    MetricName(
        f"{PREFIX}workers_alive",
        "gauge",
        (),
        "fleet",
        "Worker processes in the registry whose heartbeat has not expired.",
    ),
    MetricName(
        f"{PREFIX}queue_snapshot_age_seconds",
        "gauge",
        (),
        "fleet",
        "Age of the shared queue snapshot the fleet gauges come from.",
    ),
    MetricName(
        f"{PREFIX}jobs_total",
        "counter",
        ("name", "queue", "outcome"),
        "process",
        "Attempts this process ended, by job name, queue and outcome "
        "(completed, retried, dead-lettered, dropped, suspended, interrupted, "
        "lost, refused).",
    ),
    MetricName(
        f"{PREFIX}attempt_duration_seconds",
        "histogram",
        ("name", "queue"),
        "process",
        "How long attempts' bodies ran.",
    ),
    MetricName(
        f"{PREFIX}pickup_latency_seconds",
        "histogram",
        ("queue",),
        "process",
        "From when a job was due (its run_at) to its claim, by the database clock.",
    ),
    MetricName(
        f"{PREFIX}job_leases_lost_total",
        "counter",
        (),
        "process",
        "Held jobs whose lease this process lost (cancelled or re-taken).",
    ),
    MetricName(
        f"{PREFIX}worker_slots_busy",
        "gauge",
        (),
        "process",
        "Slots of this process running a job now.",
    ),
    MetricName(
        f"{PREFIX}worker_slots",
        "gauge",
        (),
        "process",
        "Slots of this process (its concurrency).",
    ),
    MetricName(
        f"{PREFIX}database_outages_total",
        "counter",
        (),
        "process",
        "Outages of the jobs database this process saw (each begins with "
        "jobs.db.lost).",
    ),
    MetricName(
        f"{PREFIX}database_up",
        "gauge",
        (),
        "process",
        "1 while this process reaches the jobs database, 0 during an outage.",
    ),
)
"""Every metric, fleet gauges first."""
