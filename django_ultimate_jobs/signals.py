"""Signals sent whether or not tracing is on.

- ``job_enqueued(sender=JobHandle, job, enqueued)``: after an enqueue returned.
- ``job_started(sender=JobHandle, job, claimed)``: a worker starts an attempt.
- ``job_finished(sender=JobHandle, job, claimed, outcome, error)``: an attempt
  ended (``outcome`` is the executor's outcome name).
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["job_enqueued", "job_finished", "job_started"]

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()
