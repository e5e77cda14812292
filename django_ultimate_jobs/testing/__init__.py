"""Helpers for users' tests.

- :func:`run_jobs` drains due jobs through the real worker path;
- :func:`run_scheduler` runs one cron scheduler round (fires due tasks);
- :func:`publish_outbox` publishes staged outbox messages in this thread
  (a ``TestCase`` whose enqueues went through the outbox);
- :class:`ManualClock` freezes and moves time for the drivers;
- :class:`~django_ultimate_jobs.drivers.memory.MemoryDriver` (settings
  ``ULTIMATE_JOBS = {"DRIVER": "memory"}``) keeps jobs in memory;
- :mod:`django_ultimate_jobs.testing.conformance` proves a driver.
"""

from __future__ import annotations

from ..clock import ManualClock
from ..outbox.relay import publish_pending as publish_outbox
from .runner import run_jobs
from .scheduling import run_scheduler

__all__ = ["ManualClock", "publish_outbox", "run_jobs", "run_scheduler"]
