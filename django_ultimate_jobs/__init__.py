"""django-ultimate-jobs: durable background work on PostgreSQL.

The public API is what ``__all__`` lists; everything else may move. Import
costs nothing: no models, no settings are touched until first use.
"""

from __future__ import annotations

from .crontask import TaskHandle, task
from .drivers.base import Enqueued
from .errors import (
    JobsError,
    RateLimited,
    RetryAfter,
    RetryClass,
    Terminal,
    register_error_retry,
)
from .events import publish_event
from .jobs import Concurrency, JobHandle, job
from .retry import Retry
from .signals import job_enqueued, job_finished, job_started
from .states import JobState

__all__ = [
    "Concurrency",
    "Enqueued",
    "JobHandle",
    "JobState",
    "JobsError",
    "RateLimited",
    "Retry",
    "RetryAfter",
    "RetryClass",
    "TaskHandle",
    "Terminal",
    "job",
    "job_enqueued",
    "job_finished",
    "job_started",
    "publish_event",
    "register_error_retry",
    "task",
]

__version__ = "0.1.0"
