"""The scheduler role: fire each cron task occurrence exactly once.

Two mechanisms, and safety rests on the second:

1. a leader lease (a row of the lease table, 30 s TTL, renewed every 10 s)
   so that normally one node works and the others only ask, every 10 s,
   whether the lease lapsed;
2. the fire statement (``cron_task_fire``), which moves the task's
   watermark from the value this node read AND inserts the occurrence's
   jobs in one statement: two nodes that both believe they lead (a paused
   leader that wakes after its lease lapsed) still queue an occurrence once.

While leading, a node remembers each task's watermark and next due instant
and reads nothing while nothing is due: the idle cost is the lease renewal,
6 statements a minute (``bench/idle.py --scheduler`` measures it). Time
comes from the driver's clock, so tests move a
:class:`~django_ultimate_jobs.clock.ManualClock` through an hour of
occurrences in milliseconds.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from uuid import UUID

from django.db import connections

from .. import tracing
from ..clock import Clock
from ..crontask import TaskHandle, registered_tasks
from ..drivers import get_driver
from ..drivers.base import JobDriver
from ..drivers.cron import SCHEDULER_LEASE_KEY, FireResult, TaskArm, TaskFire
from ..drivers.sessions import Session

__all__ = ["Fired", "LeaderLease", "Scheduler", "SchedulerThread"]

logger = logging.getLogger("django_ultimate_jobs")

LEADER_TTL_MS = 30_000
RENEWALS_PER_TTL = 3
PAUSE_RECHECK = timedelta(seconds=5)
"""A paused (or failing) task is looked at again after this long."""
ERROR_DELAY_S = 5.0
ASK_AGAIN_AFTER_ERROR = timedelta(seconds=1)
"""After a lease call failed: the next ask, instead of a renewal interval later."""


@dataclass(frozen=True, slots=True)
class Fired:
    """One occurrence this scheduler fired."""

    task: str
    occurrence: datetime
    job_ids: tuple[UUID, ...]
    deduped: int


class LeaderLease:
    """Whether this node leads: asks the database at most every TTL / 3.

    A grant is trusted from memory until the next ask (measured from before
    the call, on the scheduler's clock); a standby asks on the same cadence.
    """

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        *,
        holder: str | None = None,
        ttl_ms: int = LEADER_TTL_MS,
        key: str = SCHEDULER_LEASE_KEY,
        role: Session | None = None,
    ) -> None:
        self.driver = driver
        self.clock = clock
        self.role = role
        """The scheduler thread's database role (``runjobs``), else ``None``."""
        self.holder = holder or _holder_id()
        self.ttl_ms = ttl_ms
        self.key = key
        self.renew_every = timedelta(milliseconds=ttl_ms // RENEWALS_PER_TTL)
        self.leading = False
        self.asked_at: datetime | None = None
        self._confirmed = False

    def check(self) -> bool:
        """Answer whether this node leads, renewing or asking when due."""
        now = self.clock.now()
        # A wall clock stepped backwards asks again rather than trusting on.
        if (
            self.asked_at is not None
            and timedelta(0) <= now - self.asked_at < self.renew_every
        ):
            return self.leading and self._confirmed
        self.asked_at = now
        if self.role is not None:
            self.role.refresh()  # a connection closed while idle: replaced now
        try:
            leading = self.driver.cron.leader_acquire(
                self.key, self.holder, ttl_ms=self.ttl_ms
            )
        except Exception as error:
            if not self.driver.sessions.recover(self.role, error):
                logger.warning(
                    "jobs.scheduler.round-failed",
                    extra={"holder": self.holder},
                    exc_info=True,
                )
            # Unknown, not lost: fire nothing until an answer, ask again
            # soon rather than a renewal later, and keep what was known (a
            # failed renewal is not another holder: no leadership-lost).
            self._confirmed = False
            self.asked_at = now - self.renew_every + ASK_AGAIN_AFTER_ERROR
            return False
        if self.role is not None:
            self.role.ok()
        self._confirmed = True
        if leading and not self.leading:
            logger.info("jobs.scheduler.leading", extra={"holder": self.holder})
        elif self.leading and not leading:
            logger.warning(
                "jobs.scheduler.leadership-lost", extra={"holder": self.holder}
            )
        self.leading = leading
        return leading

    def next_ask(self) -> datetime:
        """When :meth:`check` will next ask the database."""
        return (self.asked_at or self.clock.now()) + self.renew_every

    def release(self) -> None:
        """Give the lease up (a standby takes over at its next ask)."""
        if self.leading:
            self.driver.cron.leader_release(self.key, self.holder)
            self.leading = False


@dataclass(slots=True)
class _Known:
    """What a leading node remembers of a task between rounds."""

    watermark: datetime
    next_due: datetime
    look_again: datetime | None = None


class Scheduler:
    """Fire due occurrences of the declared tasks; one round per :meth:`tick`."""

    def __init__(
        self,
        *,
        driver: JobDriver | None = None,
        tasks: Callable[[], Sequence[TaskHandle]] = registered_tasks,
        clock: Clock | None = None,
        holder: str | None = None,
        lease_ttl_ms: int = LEADER_TTL_MS,
        role: Session | None = None,
    ) -> None:
        self.driver = driver or get_driver()
        self.clock: Clock = clock if clock is not None else self.driver.clock
        self.tasks = tasks
        self.lease = LeaderLease(
            self.driver, self.clock, holder=holder, ttl_ms=lease_ttl_ms, role=role
        )
        self.known: dict[str, _Known] = {}
        self.fired: list[Fired] = []
        """Every occurrence this scheduler fired (tests and tooling read it)."""

    def tick(self) -> float:
        """Run one round; answer the seconds until the next round is due."""
        if not self.lease.check():
            self.known.clear()
            return self._seconds_until(self.lease.next_ask())
        tasks = list(self.tasks())
        now = self.clock.now()
        self._sync([t for t in tasks if t.name not in self.known], now)
        paused: set[str] | None = None
        for handle in tasks:
            known = self.known.get(handle.name)
            if known is None or not self._due(known, now):
                continue
            if paused is None:
                # Read at most once a round, and only when a task is due.
                paused = {p.name for p in self.driver.cron.paused_tasks()}
            if handle.name in paused:
                known.look_again = now + PAUSE_RECHECK
                continue
            try:
                self._dispatch(handle, known, now)
            except Exception as error:
                if not self.driver.sessions.recover(self.lease.role, error):
                    logger.exception(
                        "jobs.task.round-failed", extra={"task": handle.name}
                    )
                known.look_again = now + PAUSE_RECHECK
        if any(t.name not in self.known for t in tasks):
            return 0.0  # a task to read again (another node fired it)
        wake_at = [self.lease.next_ask()]
        for known in self.known.values():
            wake_at.append(known.look_again or known.next_due)
        return self._seconds_until(min(wake_at))

    def run(self, stop: threading.Event) -> None:
        """Run rounds until ``stop`` is set, sleeping until the next is due."""
        logger.info("jobs.scheduler.started", extra={"holder": self.lease.holder})
        while not stop.is_set():
            try:
                delay = self.tick()
            except Exception as error:
                if not self.driver.sessions.recover(self.lease.role, error):
                    logger.exception(
                        "jobs.scheduler.round-failed",
                        extra={"holder": self.lease.holder},
                    )
                self.known.clear()
                delay = ERROR_DELAY_S
            stop.wait(delay)
        try:
            self.lease.release()
        except Exception:
            logger.warning(
                "jobs.scheduler.round-failed",
                extra={"holder": self.lease.holder},
                exc_info=True,
            )

    # -- one task ------------------------------------------------------------

    def _due(self, known: _Known, now: datetime) -> bool:
        if known.look_again is not None and known.look_again > now:
            return False
        return known.next_due <= now

    def _sync(self, tasks: Sequence[TaskHandle], now: datetime) -> None:
        if not tasks:
            return
        # A task seen for the first time arms at now: it fires from its next
        # occurrence on, never retroactively for all of history.
        watermarks = self.driver.cron.task_sync(
            [
                TaskArm(
                    name=t.name,
                    cron=t.cron,
                    tz=t.tz,
                    watermark=now,
                    next_run_at=t.schedule.next_after(now),
                )
                for t in tasks
            ]
        )
        for handle in tasks:
            watermark = watermarks[handle.name]
            self.known[handle.name] = _Known(
                watermark, handle.schedule.next_after(watermark)
            )

    def _dispatch(self, handle: TaskHandle, known: _Known, now: datetime) -> None:
        schedule = handle.schedule
        if handle.catch_up == "run-all":
            occurrences = schedule.latest(
                known.watermark, now, limit=handle.max_catch_up
            )
            plan = [(o, o) for o in occurrences]
        elif handle.catch_up == "run-once":
            # The earliest missed occurrence, and the watermark moves to now
            # in the same write: a crash cannot fire a second catch-up.
            plan = [(known.next_due, now)]
        else:
            latest = schedule.latest(known.watermark, now, limit=1)
            plan = [(o, o) for o in latest]
        for occurrence, watermark in plan:
            next_run = schedule.next_after(watermark)
            result = self._fire(
                TaskFire(
                    name=handle.name,
                    expected=known.watermark,
                    watermark=watermark,
                    occurrence=occurrence,
                    next_run_at=next_run,
                    jobs=handle.requests(occurrence),
                )
            )
            if result is None:
                # Another node fired it (or moved the watermark): re-read.
                logger.info(
                    "jobs.scheduler.already-fired",
                    extra={"task": handle.name, "occurrence": occurrence.isoformat()},
                )
                del self.known[handle.name]
                return
            known.watermark, known.next_due = watermark, next_run
            self.fired.append(
                Fired(handle.name, occurrence, tuple(result.inserted), result.deduped)
            )
            logger.info(
                "jobs.scheduler.dispatched",
                extra={
                    "task": handle.name,
                    "occurrence": occurrence.isoformat(),
                    "tz": handle.tz,
                    "catch_up": handle.catch_up,
                    "jobs": len(result.inserted),
                    "deduped": result.deduped,
                },
            )

    def _fire(self, fire: TaskFire) -> FireResult | None:
        """Fire one occurrence; with tracing on, in a producer span whose
        context the jobs carry (their runs link to it)."""
        if not tracing.enabled():
            return self.driver.cron.task_fire(fire)
        with tracing.producing(fire.jobs, "fire", task=fire.name) as producing:
            return self.driver.cron.task_fire(replace(fire, jobs=producing.requests))

    def _seconds_until(self, instant: datetime) -> float:
        return max(0.0, (instant - self.clock.now()).total_seconds())


class SchedulerThread:
    """The scheduler inside ``runjobs``: a daemon thread, stopped on drain."""

    def __init__(self, scheduler: Scheduler | None = None) -> None:
        self.scheduler = scheduler or Scheduler()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name="jobs-scheduler", daemon=True
        )

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and release the lease (a standby takes over)."""
        self._stop.set()
        self._thread.join(timeout)

    def _main(self) -> None:
        role = self.scheduler.lease.role
        if role is not None:
            role.bind()
        try:
            self.scheduler.run(self._stop)
        finally:
            # This thread's own connections (Django keeps one per thread).
            connections.close_all()


def _holder_id() -> str:
    return f"scheduler-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
