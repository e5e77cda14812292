"""The keeper: the worker's clockwork thread (``uj-keeper``).

Every 50 ms at most it fires attempt deadlines, splits a chunk whose job
runs long and takes the drain's next step; every heartbeat it renews every
lease the process holds in one statement (cancelling an attempt whose lease
or fleet-wide slot was lost), refreshes the worker's registry row while
busy, and, after settled work, folds the counter tiers every ten minutes.
At the end it takes the registry row away (:meth:`Keeper.forget`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from ..drivers.base import JobDriver, WorkerRecord
from ..drivers.sessions import Session
from ..errors import JobLeaseLost, JobSlotLost, JobTimeout
from .config import WorkerConfig
from .executor import Attempt, Execution, settle_for
from .held import HeldAttempts
from .lifecycle import Lifecycle
from .logfields import job_fields
from .settle import SettleLoop
from .slots import SlotPool

__all__ = ["COUNTER_ROLLUP_INTERVAL_S", "Keeper"]

logger = logging.getLogger("django_ultimate_jobs")

COUNTER_ROLLUP_INTERVAL_S = 600.0
_TICK_S = 0.05


class Keeper:
    """Leases, deadlines, chunk splits, the drain's steps, roll-up, the registry row."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        driver: JobDriver,
        held: HeldAttempts,
        life: Lifecycle,
        slots: SlotPool,
        settler: SettleLoop,
        submit: Callable[[list[Execution]], None],
        in_passing: Callable[[], None],
        session: Session,
        worker_id: str,
    ) -> None:
        self._config = config
        self.driver = driver
        self._held = held
        self._life = life
        self._slots = slots
        self._settler = settler
        self._submit = submit
        self._in_passing = in_passing
        """Ask the claim loop to refresh the registry row with its next claim."""
        self._db = session
        self._worker_id = worker_id
        self.leases_lost = 0
        """Held attempts whose lease was lost (the metrics read it)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._announced = False
        self._rolled_up_at = time.monotonic()
        self._processed_at_rollup = 0

    # -- the thread ----------------------------------------------------------------

    def start(self) -> None:
        """Start the keeper thread (``uj-keeper``)."""
        self._thread = threading.Thread(target=self.run, name="uj-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end after its current tick."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def run(self) -> None:
        """The keeper thread's body: tick until stopped."""
        next_beat = time.monotonic()
        self._db.bind()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_beat:
                    self.renew_leases()
                    # After a failed renewal, the next try comes on the
                    # process's reconnect schedule, not a heartbeat later:
                    # leases must be renewed before they lapse.
                    next_beat = now + (
                        0.05 if self._db.failing else self._config.heartbeat_ms / 1000
                    )
                    self._maybe_roll_up(now)
                self.fire_deadlines(now)
                self._slots.rebalance(now)
                self.drain_step(now)
                self._stop.wait(min(_TICK_S, max(0.0, next_beat - now)))
        finally:
            connections.close_all()

    # -- leases --------------------------------------------------------------------

    def renew_leases(self) -> None:
        """Renew every held lease in one statement; cancel the attempts that lost theirs."""
        held = self._held.unsettled()
        visibility_s = self._config.visibility_ms / 1000
        if self._db.failing:
            # A try is taken only to be used: one taken and not used would
            # starve the roles that have work for the database (the settler).
            if not held:
                self._db.stand_down()
            elif self._db.retry_in() > 0:
                return
        if held:
            self._db.refresh()
            try:
                landed = self.driver.heartbeat_many(
                    [(a.claimed.id, a.claimed.identity) for a in held],
                    visibility_ms=self._config.visibility_ms,
                )
            except Exception as error:
                if not self._db.failed(error):
                    logger.warning("jobs.heartbeat.failed", exc_info=True)
                landed = None
            else:
                self._db.ok()
            now = time.monotonic()
            for attempt in held:
                if landed is not None and attempt.claimed.id in landed:
                    attempt.renewed = now
                    if attempt.claimed.id in landed.slots_lost:
                        self._lose_slot(attempt)
                elif landed is not None or now - attempt.renewed >= visibility_s:
                    self._lose(attempt)
        if not self._db.failing:
            self._announce(bool(held))

    def _lose(self, attempt: Attempt) -> None:
        # A body that ignores its cancellation stays held: its lease is lost
        # once (one log line, one count), not at every later heartbeat.
        if attempt.settled or "lease" in attempt.lost:
            return
        attempt.lost.add("lease")
        self.leases_lost += 1
        logger.error("jobs.lease.lost", extra=_job_extra(attempt))
        attempt.token.cancel(
            JobLeaseLost(
                "this worker no longer holds the job (cancelled or re-claimed)"
            )
        )

    def _lose_slot(self, attempt: Attempt) -> None:
        # The row is still ours but its fleet-wide slot lapsed (a stall past
        # the visibility timeout) or was taken: stop the body, so the cap
        # holds. It settles through the ordinary failure path (retried).
        if attempt.settled or "slot" in attempt.lost:
            return
        attempt.lost.add("slot")
        logger.error("jobs.worker.slot-lost", extra=_job_extra(attempt))
        name = attempt.claimed.name
        attempt.token.cancel(
            JobSlotLost(f"the fleet-wide slot of {name} lapsed or was taken")
        )

    # -- deadlines and the drain -----------------------------------------------------

    def fire_deadlines(self, now: float) -> None:
        """Settle as timed out every attempt whose deadline has passed."""
        for attempt in self._held.past_deadline(now):
            timeout_ms = attempt.timeout_ms
            reason = JobTimeout(
                f"{attempt.claimed.name} passed its timeout of {timeout_ms} ms"
            )
            # Cancel first, then settle: the settle makes the job claimable
            # elsewhere, and a body still running must already be told to stop.
            attempt.token.cancel(reason)
            if attempt.take_settlement():
                attempt.abandoned = True
                stuck = self._held.stick()
                self._submit([settle_for(attempt, error=reason)])
                if (
                    stuck > self._config.stuck_slots_max
                    and self._life.state == "running"
                ):
                    logger.error(
                        "jobs.worker.too-many-stuck-slots", extra={"stuck": stuck}
                    )
                    self._life.request_stop(reason="stuck-slots")

    def drain_step(self, now: float) -> None:
        """At the cut-off cancel every held body; at the hand-back give them back."""
        if self._life.cutoff_at is None:
            return
        reason = self._life.cut_off(now)
        if reason is not None:
            for attempt in self._held.snapshot():
                attempt.token.cancel(reason)
        if self._life.hand_back_due(now):
            self._settler.hand_back(self._held.snapshot())

    # -- counters and the registry row -----------------------------------------------

    def _maybe_roll_up(self, now: float) -> None:
        # Fold counter tiers every 10 minutes, but only after settling work:
        # an idle worker must not spend its statement budget on it.
        if now - self._rolled_up_at < COUNTER_ROLLUP_INTERVAL_S or self._db.failing:
            return
        processed = self._held.processed
        if processed == self._processed_at_rollup:
            return
        self._rolled_up_at, self._processed_at_rollup = now, processed
        try:
            self.driver.maintenance.rollup_counters()
        except Exception as error:
            if not self._db.failed(error):
                logger.warning("jobs.worker.rollup-failed", exc_info=True)

    def _announce(self, busy: bool) -> None:
        if not busy and self._announced:
            # Idle: the next claim refreshes the registry row in passing.
            self._in_passing()
            return
        in_flight = self._held.ids(100)
        try:
            self.driver.announce_worker(
                self._record(in_flight), ttl_ms=self._config.visibility_ms
            )
            self._announced = True
        except Exception as error:
            if not self._db.failed(error):
                logger.warning("jobs.worker.announce-failed", exc_info=True)

    def _record(self, in_flight: list[str]) -> WorkerRecord:
        from django.utils import timezone

        now = timezone.now()
        return WorkerRecord(
            id=self._worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(self._config.queues),
            concurrency=self._config.concurrency,
            in_flight=in_flight,
            started_at=now,
            heartbeat_at=now,
            expires_at=now,
        )

    def forget(self) -> None:
        """Take this worker's registry row away (at the end of the drain)."""
        try:
            self.driver.forget_worker(self._worker_id)
        except Exception:
            self.driver.sessions.reset_broken()
            logger.warning("jobs.worker.forget-failed", exc_info=True)


def _job_extra(attempt: Attempt) -> dict[str, Any]:
    return job_fields(attempt.claimed)
