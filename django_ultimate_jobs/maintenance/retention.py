"""The retention sweep: finished jobs and their steps, expired events, old
counters, published outbox messages, and lock rows lapsed an hour ago.

Each target deletes in batches of at most ``batch`` rows, one short
transaction per batch, picking rows through the partial indexes that hold
only finished rows (``uj_job_done_idx``, ``uj_job_finished_idx``): the
claim path never reads what the sweep reads nor waits on what it locks.
One clock reading serves a whole pass (a sweep that compared some targets
against another clock once deleted live rows under a frozen test clock,
upstream §20.1).

:func:`sweep_retention` works without a worker (a shell, a cron line);
the ``ultimate_jobs.retention`` job runs each target as a durable step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from ..conf import jobs_settings
from ..drivers import get_driver
from ..drivers.maintenance import FinishedKind
from ..errors import JobInputInvalid
from ..outbox.store import OutboxStore
from .instant import maintenance_now, require_aware

__all__ = [
    "DEFAULT_BATCH",
    "TARGETS",
    "in_batches",
    "sweep_retention",
    "sweep_target",
]

DEFAULT_BATCH = 5_000
"""Rows per batch: large enough to amortise a round trip, small enough that
one batch commits within about 0.1 s (bench/retention.py: median 96 ms,
longest 160 ms on a 2-core machine)."""

TARGETS = ("done", "failed", "events", "counters", "outbox", "locks")
"""The sweep's targets, in the order a pass runs them."""

LOCK_ROW_GRACE = timedelta(hours=1)
"""A ``lock:`` lease row is deleted once it lapsed this long ago. A lapsed
row is already free (the next grant takes it over); the grace keeps a
recently lost lock visible in ``jobs leases`` for a while. Only ``lock:``
rows are swept: a job slot is swept by nobody (few, one per slot), and the
leader lease's fence counts takeovers of its own row."""


def sweep_retention(
    now: datetime | None = None, *, batch: int = DEFAULT_BATCH
) -> dict[str, int]:
    """Delete what has outlived its retention window; answer counts per target.

    Done jobs older than ``RETENTION["done"]`` and failed, dead and
    cancelled jobs older than ``RETENTION["failed"]`` go with their steps;
    expired events and 1-hour counter buckets past 30 days go too,
    outbox messages published longer than ``RETENTION["done"]`` ago, and
    lock rows (``lock:...`` leases) that lapsed more than an hour ago
    (:data:`LOCK_ROW_GRACE`), such as one per ``invoice:{id}`` ever locked.

    Args:
        now: the instant to sweep as of (default: the driver's clock, which
            is the database clock outside tests).
        batch: the most rows one transaction deletes.

    Returns:
        ``{"done", "failed", "steps", "events", "counters", "outbox",
        "locks"}`` -> rows deleted.

    Raises:
        JobInputInvalid: ``batch`` is not a whole number of at least 1, or
            ``now`` has no timezone; before anything is deleted.
    """
    instant = now if now is not None else maintenance_now()
    report: dict[str, int] = {}
    for target in TARGETS:
        for key, count in sweep_target(target, instant, batch=batch).items():
            report[key] = report.get(key, 0) + count
    return report


def sweep_target(
    target: str, now: datetime, *, batch: int = DEFAULT_BATCH
) -> dict[str, int]:
    """Sweep one target as of ``now``; answer rows deleted by kind.

    Raises:
        JobInputInvalid: an unknown target, an invalid ``batch``, or a
            ``now`` without a timezone.
    """
    if target not in TARGETS:
        raise JobInputInvalid(f"unknown retention target {target!r} (known: {TARGETS})")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise JobInputInvalid("batch must be a whole number of at least 1")
    require_aware(now)
    driver = get_driver()
    if target == "outbox":
        # A store other processes share but no Django database holds (the
        # Redis driver) stages enqueues inside transactions in the outbox.
        stages = driver.alias is not None or driver.features.shared_across_processes
        return {"outbox": _sweep_outbox(stages, now, batch)}
    store = driver.maintenance
    if target == "locks":
        before = now - LOCK_ROW_GRACE
        purged = in_batches(lambda n: (store.purge_locks(before, limit=n), 0), batch)
        return {"locks": sum(rows for rows, _ in purged)}
    if target == "counters":
        return {"counters": store.drop_counters(now)}
    if target == "events":
        purged = in_batches(lambda n: (store.purge_events(now, limit=n), 0), batch)
        return {"events": sum(rows for rows, _ in purged)}
    kind: FinishedKind = "done" if target == "done" else "failed"
    before = now - timedelta(milliseconds=_window_ms(target))
    jobs = steps = 0
    for removed, removed_steps in in_batches(
        lambda n: store.purge_jobs(kind, before, limit=n), batch
    ):
        jobs, steps = jobs + removed, steps + removed_steps
    return {target: jobs, "steps": steps}


def in_batches(
    purge: Callable[[int], tuple[int, int]], batch: int
) -> Iterator[tuple[int, int]]:
    """Call ``purge(batch)`` until a batch comes back short.

    ``purge`` deletes one batch of at most ``batch`` rows, committed on its
    own (the driver's maintenance store: ``driver.maintenance``), and
    answers ``(rows, dependent rows)``; each answer is yielded as it
    comes, so a caller can time it (the bench does) and the sweep never
    holds a lock across batches.
    """
    while True:
        rows, dependent = purge(batch)
        yield rows, dependent
        if rows < batch:
            return


def _sweep_outbox(stages: bool, now: datetime, batch: int) -> int:
    """Published outbox messages past ``RETENTION["done"]`` (OUTBOX_DATABASE)."""
    configured = jobs_settings()
    if not stages and not configured.outbox:
        return 0  # jobs in this process's memory (tests), no outbox
    before = now - timedelta(milliseconds=configured.retention_done_ms)
    store = OutboxStore(configured.outbox_database)
    purged = in_batches(lambda n: (store.purge_published(before, limit=n), 0), batch)
    return sum(rows for rows, _ in purged)


def _window_ms(target: str) -> int:
    configured = jobs_settings()
    if target == "done":
        return configured.retention_done_ms
    return configured.retention_failed_ms
