"""Prometheus metrics: ``runjobs --metrics-port`` and a Django view.

Nothing in this package's ``__init__``, :mod:`.names`, :mod:`.models` or
:mod:`.snapshot` imports ``prometheus_client``: it is imported only by the
modules that serve metrics (:mod:`.server`, :mod:`.views`, :mod:`.collect`),
which are imported only when metrics are turned on (the ``prometheus``
extra). A project that never turns them on pays nothing.

Two kinds of metric, read two ways (docs/howto/monitoring.md):

- per process, from the worker's own hooks (the ``job_started`` and
  ``job_finished`` signals, its lease keeper, its outage tracker): jobs by
  outcome, attempt durations, pickup latency, leases lost, slots, outages;
- per fleet, from the database: queue depths, the oldest ready job, dead
  jobs, live workers. These are read at most once per ``METRICS_INTERVAL``
  for the whole fleet, through a shared snapshot row (:mod:`.snapshot`), so
  ten scraped workers cost one read of the queues, not ten.
"""

from __future__ import annotations

from .names import METRICS, PREFIX, MetricName

__all__ = ["METRICS", "PREFIX", "MetricName"]
