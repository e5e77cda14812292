"""An example driver, outside the package: jobs in a named in-process store.

The driver of docs/howto/writing-a-driver.md, and the proof that a driver
named by dotted path (``ULTIMATE_JOBS["DRIVER"] =
"tests.drivers.example.ExampleDriver"``) runs the shipped conformance suite
(tests/conformance/test_example_driver.py).

It keeps its rows in a *named store* that outlives the driver object: the
driver built from settings after ``reset_driver()`` or a settings override
names the same store (``ULTIMATE_JOBS["EXAMPLE_STORE"]``, a key this
driver declares) and finds the rows enqueued before. The store is the
memory driver's engine; this class shows what a driver declares around
one: its name, its features, its settings key, how it is built from the
settings, its roles, and the verbs of the contract, each handed to the
store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django_ultimate_jobs.clock import Clock, system_clock
from django_ultimate_jobs.conf import JobsSettings, Kind
from django_ultimate_jobs.drivers.base import (
    AckRequest,
    BulkResult,
    ClaimIdentity,
    ClaimOptions,
    ClaimResult,
    CounterBucket,
    CounterTotal,
    Enqueued,
    EnqueueRequest,
    JobFilter,
    JobRecord,
    NackRequest,
    PausedName,
    QueueStats,
    Renewed,
    WorkerRecord,
)
from django_ultimate_jobs.drivers.basedriver import BaseDriver
from django_ultimate_jobs.drivers.features import DriverFeatures
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.errors import SettingsInvalid

__all__ = ["ExampleDriver", "forget_store", "open_store"]

_STORES: dict[str, MemoryDriver] = {}
_STORES_LOCK = threading.Lock()


def open_store(name: str, clock: Clock = system_clock) -> MemoryDriver:
    """The store ``name`` (made on first use, on ``clock``)."""
    with _STORES_LOCK:
        store = _STORES.get(name)
        if store is None:
            store = _STORES[name] = MemoryDriver(clock=clock)
        return store


def forget_store(name: str) -> None:
    """Drop the store ``name`` and every row in it."""
    with _STORES_LOCK:
        store = _STORES.pop(name, None)
    if store is not None:
        store.close()


def _store_name(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS[{key!r}] must be a non-empty store name, got {value!r:.80}"
        )
    return value


class ExampleDriver(BaseDriver):
    """Jobs in the named store of ``ULTIMATE_JOBS["EXAMPLE_STORE"]``."""

    name = "example"
    features = DriverFeatures()
    """No flag: one process, no LISTEN, no Django transaction to join."""
    settings_keys = {"EXAMPLE_STORE": Kind("a non-empty store name", _store_name)}

    def __init__(self, store: MemoryDriver) -> None:
        self.store = store
        self.clock = store.clock
        # The roles are the store's: steps and events, slots and locks,
        # cron tasks, retention purges and the counter roll-up.
        self.steps = store.steps
        self.events = store.events
        self.leases = store.leases
        self.cron = store.cron
        self.maintenance = store.maintenance

    @classmethod
    def from_settings(cls, settings: JobsSettings) -> ExampleDriver:
        """The driver of the store the settings name (``"default"`` if none)."""
        return cls(open_store(settings.driver_options.get("EXAMPLE_STORE", "default")))

    # -- the verbs of the contract (drivers/base.py), each the store's --------

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many jobs; answers in request order."""
        return self.store.enqueue_many(requests)

    def claim(self, options: ClaimOptions) -> ClaimResult:
        """Claim due jobs; re-take lapsed leases; bury lapsed final attempts."""
        return self.store.claim(options)

    def ack_many(self, requests: Sequence[AckRequest]) -> list[bool]:
        """Settle successful attempts; answers in order."""
        return self.store.ack_many(requests)

    def nack(self, request: NackRequest) -> bool:
        """Hand an attempt back; True if it landed."""
        return self.store.nack(request)

    def heartbeat_many(
        self, held: Iterable[tuple[UUID, ClaimIdentity | None]], *, visibility_ms: int
    ) -> Renewed:
        """Extend many leases; answers the ids that landed."""
        return self.store.heartbeat_many(held, visibility_ms=visibility_ms)

    def mark_started(self, job_id: UUID, identity: ClaimIdentity) -> bool:
        """Record that this claim's body starts now."""
        return self.store.mark_started(job_id, identity)

    def record_progress(
        self, job_id: UUID, identity: ClaimIdentity, progress: Mapping[str, Any]
    ) -> bool:
        """Store progress on a running job."""
        return self.store.record_progress(job_id, identity, progress)

    def stats(self) -> list[QueueStats]:
        """Depth per queue."""
        return self.store.stats()

    def get(self, job_id: UUID) -> JobRecord | None:
        """One job row, or ``None``."""
        return self.store.get(job_id)

    def requeue(self, job_id: UUID, *, from_step: str | None = None) -> JobRecord:
        """Make a finished job ready again."""
        return self.store.requeue(job_id, from_step=from_step)

    def promote(self, job_id: UUID) -> JobRecord:
        """Make a waiting job due now."""
        return self.store.promote(job_id)

    def cancel(self, job_id: UUID, *, reason: str | None = None) -> JobRecord:
        """Cancel a live job."""
        return self.store.cancel(job_id, reason=reason)

    def remove(self, job_id: UUID) -> bool:
        """Delete a job that is not running."""
        return self.store.remove(job_id)

    def list_jobs(
        self, where: JobFilter, *, before: UUID | None, limit: int
    ) -> list[JobRecord]:
        """One page of jobs, newest first."""
        return self.store.list_jobs(where, before=before, limit=limit)

    def count(self, where: JobFilter) -> int:
        """How many jobs match."""
        return self.store.count(where)

    def requeue_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Requeue finished rows, oldest first."""
        return self.store.requeue_many(where, limit=limit)

    def remove_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Delete rows that are not running, oldest first."""
        return self.store.remove_many(where, limit=limit)

    def promote_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Make waiting rows due now, oldest first."""
        return self.store.promote_many(where, limit=limit)

    def counter_totals(self, since: datetime) -> list[CounterTotal]:
        """Per job name, the counters from ``since`` on."""
        return self.store.counter_totals(since)

    def counter_buckets(self, since: datetime) -> list[CounterBucket]:
        """Every counter bucket from ``since`` on."""
        return self.store.counter_buckets(since)

    def pause_queue(self, queue: str) -> list[PausedName]:
        """Pause a queue."""
        return self.store.pause_queue(queue)

    def resume_queue(self, queue: str) -> list[PausedName]:
        """Resume a queue."""
        return self.store.resume_queue(queue)

    def paused_queues(self) -> list[PausedName]:
        """Paused queues."""
        return self.store.paused_queues()

    def announce_worker(self, worker: WorkerRecord, *, ttl_ms: int) -> None:
        """Insert or refresh a worker's registry row."""
        self.store.announce_worker(worker, ttl_ms=ttl_ms)

    def forget_worker(self, worker_id: str) -> None:
        """Delete a worker's registry row."""
        self.store.forget_worker(worker_id)

    def workers(self) -> list[WorkerRecord]:
        """Live workers."""
        return self.store.workers()
