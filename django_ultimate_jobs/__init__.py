"""django-ultimate-jobs: durable background work on PostgreSQL.

The public API is what ``__all__`` lists; everything else may move. Import
costs nothing: no models, no settings are touched until first use.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

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
    "CreatePartitionedModel",
    "Enqueued",
    "HeldLock",
    "JobHandle",
    "JobState",
    "JobsError",
    "RateLimited",
    "Retry",
    "RetryAfter",
    "RetryClass",
    "TaskHandle",
    "Terminal",
    "backfill",
    "fenced_update",
    "job",
    "job_enqueued",
    "job_finished",
    "job_started",
    "lock",
    "maintain_partitions",
    "partitioned",
    "publish_event",
    "register_error_retry",
    "sweep_retention",
    "task",
]

_DISTRIBUTION = "django-ultimate-jobs"
_UNKNOWN_VERSION = "0+unknown"

if TYPE_CHECKING:
    from .backfills import backfill
    from .locks import HeldLock, fenced_update, lock
    from .maintenance.operations import CreatePartitionedModel
    from .maintenance.partitions import maintain_partitions, partitioned
    from .maintenance.retention import sweep_retention

# Maintenance and lock names (backfill included) load on first use: they pull in django.db.migrations
# and the Postgres driver, which a plain ``import django_ultimate_jobs``
# must not pay for.
_LAZY = {
    "backfill": ".backfills",
    "CreatePartitionedModel": ".maintenance.operations",
    "HeldLock": ".locks",
    "fenced_update": ".locks",
    "lock": ".locks",
    "maintain_partitions": ".maintenance.partitions",
    "partitioned": ".maintenance.partitions",
    "sweep_retention": ".maintenance.retention",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)


@cache
def _version() -> str:
    """The installed release, from the distribution's metadata.

    Read on first use (the metadata lookup scans ``sys.path``), so that
    ``import django_ultimate_jobs`` stays free. A source tree that was never
    installed answers ``0+unknown`` rather than a number that may be stale.
    """
    try:
        return metadata.version(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return _UNKNOWN_VERSION
