"""The worker: the composition root that builds, starts and drains its parts.

Threads of one worker process, each the body of one part:

- the claim loop (:mod:`.claimloop`, the thread that calls
  :meth:`Worker.run`) claims up to the free capacity in one statement and
  hands attempts to the slots;
- ``concurrency`` slot threads (:mod:`.slots`) run bodies through
  :func:`~.executor.run_attempt`;
- one settle thread (:mod:`.settle`) writes settlements in batches;
- one keeper thread (:mod:`.keeper`) renews leases in one statement per
  interval, cancels attempts whose lease is lost, fires attempt deadlines
  and takes the drain's steps;
- with ``config.scheduler`` and a task declared, the cron scheduler thread
  (:mod:`.scheduler`);
- optionally the wake listener (``driver.wake_listener()``, LISTEN on
  PostgreSQL, started by ``runjobs``), which only makes the next poll sooner.

The parts share one object, the attempts this process holds
(:class:`~.held.HeldAttempts`), and read the worker's state from its
:class:`~.lifecycle.Lifecycle`; none reaches into another. Each thread has
its own session to storage (``driver.sessions``), named for its role and
reset after a loss: when the database goes away, every role reconnects on its
next use, on one process-wide backoff, and the settle loop keeps finished
work until it can write it. :meth:`Worker.tick` runs one claim pass inline
in the caller's thread: the test helper uses it.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..context import CancellationToken
from ..crontask import registered_tasks
from ..drivers import get_driver
from ..drivers.base import JobDriver
from ..drivers.sessions import Session
from ..wake import wake_hub
from .backoff import IdleBackoff
from .claimloop import ClaimLoop
from .config import WorkerConfig
from .executor import Execution
from .held import HeldAttempts
from .keeper import Keeper
from .lifecycle import Lifecycle
from .scheduler import Scheduler, SchedulerThread
from .settle import SettleLoop, announce_buried
from .slots import SlotPool
from .wakeflag import ClaimWake
from .watchers import AttemptWatchers

__all__ = ["Worker", "new_worker_id"]

logger = logging.getLogger("django_ultimate_jobs")


def new_worker_id() -> str:
    """A worker id unique per process incarnation (never just the host)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """One worker process's runtime."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        driver: JobDriver | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.config = config
        self.driver = driver or get_driver()
        self.id = worker_id or new_worker_id()
        self.backoff = IdleBackoff(
            config.poll_ms / 1000,
            config.idle_max_ms / 1000,
            config.woken_idle_max_ms / 1000,
        )
        self.outage = self.driver.sessions.outage()
        """Shared by every role of this process (and its lock keeper): one
        backoff, one log line each way."""
        wake = ClaimWake(self.backoff)
        self.lifecycle = Lifecycle(
            worker_id=self.id,
            shutdown_deadline_ms=config.shutdown_deadline_ms,
            wake=wake,
        )
        self.held = HeldAttempts(config, life=self.lifecycle, wake=wake)
        # The settle queue: the slots, the keeper and the drain put lists of
        # executions on it; the settle loop is its one reader.
        settles: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.watchers = AttemptWatchers()
        """This process's own instruments, told of each attempt directly."""
        self.slots = SlotPool(
            config,
            driver=self.driver,
            held=self.held,
            life=self.lifecycle,
            submit=settles.put,
            open_session=self.role,
            outage=self.outage,
            worker_id=self.id,
            watchers=self.watchers,
        )
        self.claims = ClaimLoop(
            config,
            driver=self.driver,
            held=self.held,
            life=self.lifecycle,
            wake=wake,
            slots=self.slots,
            session=self.role("claim", claim_thread=True),
            worker_id=self.id,
        )
        self.settler = SettleLoop(
            self.driver,
            held=self.held,
            life=self.lifecycle,
            settles=settles,
            session=self.role("settle"),
            worker_id=self.id,
            handover=self.claims.handover,
            on_heirs=self.claims.take_heirs,
            on_due=wake.due,
            watchers=self.watchers,
        )
        self.keeper = Keeper(
            config,
            driver=self.driver,
            held=self.held,
            life=self.lifecycle,
            slots=self.slots,
            settler=self.settler,
            submit=settles.put,
            in_passing=self.claims.refresh_registry_in_passing,
            session=self.role("keep"),
            worker_id=self.id,
        )
        self._reached = False
        self.scheduler: SchedulerThread | None = None
        # With no task declared there is nothing to lead: no lease traffic.
        if config.scheduler and registered_tasks():
            self.scheduler = SchedulerThread(
                Scheduler(driver=self.driver, role=self.role("schedule"))
            )

    def role(self, name: str, *, claim_thread: bool = False) -> Session:
        """A session of this worker process to storage (bind it in its own thread).

        ``claim_thread``: the session tunes its thread for the claim loop.
        """
        return self.driver.sessions.open(
            name, worker_id=self.id, outage=self.outage, claim_thread=claim_thread
        )

    # -- what callers read -------------------------------------------------------

    @property
    def state(self) -> str:
        """``idle``, ``running``, ``draining`` or ``stopped``."""
        return self.lifecycle.state

    @property
    def exit_reason(self) -> str | None:
        """Why the worker stopped (``signal`` names, ``burst``, ``max-jobs``...)."""
        return self.lifecycle.exit_reason

    @property
    def drain_token(self) -> CancellationToken:
        """Cancelled at the drain's cut-off."""
        return self.lifecycle.drain_token

    @property
    def processed(self) -> int:
        """Settled attempts of known jobs (what ``max_jobs`` counts)."""
        return self.held.processed

    @property
    def counts(self) -> dict[str, int]:
        """Settled attempts by outcome."""
        return self.held.counts

    @property
    def slots_busy(self) -> int:
        """Slots running (or stuck in) a body now."""
        return self.config.concurrency - self.held.idle_slots()

    @property
    def leases_lost(self) -> int:
        """Held attempts whose lease this process lost (``jobs.lease.lost``)."""
        return self.keeper.leases_lost

    def held_count(self) -> int:
        """Attempts claimed and not yet settled."""
        return self.held.count()

    def request_stop(
        self, deadline_s: float | None = None, reason: str = "signal"
    ) -> None:
        """Stop claiming now; running jobs get until the deadline (drain)."""
        self.lifecycle.request_stop(deadline_s, reason)

    # -- one pass, inline (tests) ----------------------------------------------

    def tick(self) -> list[Execution]:
        """Claim once and run every claimed job in this thread; return them.

        The same claim, executor and settle as the threaded loop, so a test
        exercises the real path. Timeouts cancel the token from a timer.
        """
        claimed, buried = self.claims.claim(self.config.claim_batch)
        announce_buried(buried)
        executions = self.slots.run_inline(claimed)
        try:
            self.settler.settle(executions)
        except Exception:
            logger.exception("jobs.worker.settle-failed")
            self.driver.sessions.reset_broken()
            self.settler.give_up(executions)
        return executions

    # -- the threaded loop -----------------------------------------------------

    def run(
        self,
        *,
        install_signals: Callable[[Worker], None] | None = None,
        outstanding: Callable[[], bool] | None = None,
    ) -> int:
        """Run until stopped (or idle with ``burst``); return an exit code.

        ``outstanding``: with ``burst``, whether work for its queues waits
        elsewhere (the outbox of ``runjobs``' relay); the burst waits for it.

        1 when the worker could not serve: its store never answered (a
        burst gives up, ``exit_reason`` ``unreachable``) or its tables are
        missing (``lifecycle.refused`` says so).
        """
        if install_signals is not None:
            install_signals(self)
        if not self.reach():
            self.lifecycle.stopped()
            return self.exit_status
        self.slots.start()
        self.settler.start()
        self.keeper.start()
        if self.scheduler is not None:
            self.scheduler.start()
        unsubscribe = wake_hub.subscribe(self.claims.on_wake)
        logger.info(
            "jobs.worker.started",
            extra={"worker_id": self.id, "queues": list(self.config.queues)},
        )
        try:
            self.claims.run(outstanding)
        finally:
            unsubscribe()
            self._finish()
        return self.exit_status

    def reach(self) -> bool:
        """Wait until storage answers (:meth:`.ClaimLoop.reach`); False: stop.

        Nothing starts until it does: a worker pointed at the wrong place, or
        not migrated, says so once and stops. :meth:`run` calls it; a caller
        may call it first, before it starts what else talks to storage.
        """
        self.lifecycle.start()
        if not self._reached:
            self._reached = self.claims.reach()
        return self._reached

    @property
    def exit_status(self) -> int:
        """1 when the worker could not serve (``unreachable``, ``refused``), else 0."""
        return 1 if self.exit_reason in ("unreachable", "refused") else 0

    def _finish(self) -> None:
        """Wait for held work under the drain budget, then stop every thread."""
        life = self.lifecycle
        if life.state == "running":
            life.request_stop(reason=life.exit_reason or "stopped")
        # The drain's first step: rows held ahead that no slot has started
        # go back now, ready at once and uncounted, rather than start after
        # the stop or wait for the hand-back at deadline - margin/2. A
        # capped one holds its key's fleet-wide slot meanwhile, and any one
        # could run on another worker (found by the limits review).
        self.settler.hand_back(self.slots.take_unstarted())
        deadline = life.deadline_at or time.monotonic()
        while self.held.count() > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.held.count() > 0:
            logger.error(
                "jobs.worker.drain-abandoned",
                extra={"held": self.held.count(), "fix": "raise SHUTDOWN_DEADLINE"},
            )
        self.slots.stop()
        self.settler.stop()
        self.keeper.stop()
        self.slots.join(deadline)
        self.settler.join(5)
        self.keeper.join(5)
        self.keeper.forget()
        if self.scheduler is not None:
            self.scheduler.stop()  # and its lease released: a standby takes over
        life.stopped()
        logger.info(
            "jobs.worker.stopped", extra={"worker_id": self.id, "counts": self.counts}
        )
