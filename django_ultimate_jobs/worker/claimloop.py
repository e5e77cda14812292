"""The claim loop: claim up to the free room in one statement, hand it to the slots.

Runs in the thread that calls :meth:`Worker.run`. Before each claim it reads
the room left by the held attempts (one lock acquire), skips claims not
worth a round trip, waits out a database outage, and decides which
statements the claim runs: the ordinary one, the capped one (rows of jobs
declaring ``concurrency=``, each with its fleet-wide slot), the sweep of
rows a removed ``concurrency=`` left keyed, and, with in-process limits,
which queues and tenants it may take and how many rows. Between claims it
waits on the :class:`~.wakeflag.ClaimWake` (a NOTIFY, room freed, a stop)
or its idle backoff. A capped row's settle hands its slot to the key's
next row without a claim (:meth:`ClaimLoop.handover`): those heirs are held
and dispatched as a claim's rows are.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from ..drivers.base import (
    ClaimedJob,
    ClaimOptions,
    ClaimResult,
    Handover,
    JobDriver,
    NackRequest,
)
from ..drivers.sessions import Session
from ..faults import AFTER_CLAIM_COMMIT, fault_point
from ..registry import registered_jobs
from .config import WorkerConfig
from .executor import Attempt
from .held import SHORT_JOB_MS, HeldAttempts
from .lifecycle import Lifecycle
from .logfields import job_fields
from .settle import announce_buried
from .slots import SlotPool
from .wakeflag import ClaimWake

__all__ = ["CAPPED_AHEAD", "STRANDED_SWEEP_S", "ClaimLoop"]

logger = logging.getLogger("django_ultimate_jobs")

STRANDED_SWEEP_S = 60.0
"""How often, under a backlog, a worker whose registry declares no
``concurrency=`` still claims rows queued with a concurrency key (it always
does when its claim comes back empty)."""
CAPPED_AHEAD = 4
"""Capped rows held per thread beyond the running ones while jobs are short.

Measured with bench/limits.py (keyed limit 1, 100 keys, 3 x 8 threads, settles
handing slots over): 1 per thread drained 0.53x the uncapped rate, 2 0.64-0.72x,
3 0.73-0.77x, 4 0.80-0.81x, 6 0.74x. A key held ahead waits in this worker,
but a key nobody holds waits for a claim to reach it, and each settle hands
a held key its next run at once: the fleet should hold about every key with
a backlog. Below the uncapped claim's whole batch (claim_batch, 64).
"""


class ClaimLoop:
    """Claims for one worker and hands what it claimed to the slot pool."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        driver: JobDriver,
        held: HeldAttempts,
        life: Lifecycle,
        wake: ClaimWake,
        slots: SlotPool,
        session: Session,
        worker_id: str,
    ) -> None:
        self._config = config
        self.driver = driver
        self._held = held
        self._life = life
        self._wake = wake
        self._slots = slots
        self._db = session
        self._worker_id = worker_id
        self._limiter = held.limiter
        self._fresh_turn = True
        """Whether the next limited claim skips partly used tenants (_limited)."""
        self._registry_due = True
        self._stranded_at = 0.0
        self._stranded_logged = False
        handles = registered_jobs()
        self._drop_names = frozenset(h.name for h in handles if not h.retry.dead_letter)
        # Rows of a job declaring concurrency= carry a lease key and are
        # claimed only with a fleet-wide slot, by a second statement that a
        # process declaring no limit never runs (its claim is unchanged). Any
        # declared limit turns it on, whatever the job's queue: a queue can
        # be chosen per enqueue (using(queue=...)).
        self.capped = any(h.concurrency is not None for h in handles)
        if self.capped:
            # A slot freed by a settle elsewhere, or by a dead holder's lease
            # passing, sends no NOTIFY: rows waiting for it are found by
            # polling, so a proven wake must not stretch the idle wait to
            # WOKEN_IDLE_POLL_MAX (a lapsed slot came back 5 s late).
            wake.backoff.woken_ceiling_s = wake.backoff.ceiling_s
        self._refuse_busy = frozenset(
            h.name
            for h in handles
            if h.concurrency is not None and h.concurrency.when_busy == "fail"
        )

    # -- the loop ------------------------------------------------------------------

    def run(self) -> None:
        """Claim and dispatch until the worker stops running (or, burst, is idle)."""
        # The session was opened with claim_thread=True: binding it tunes
        # this thread for the claim (generic plans on PostgreSQL), as this
        # thread claims, and does nothing else.
        config, held, life, db = self._config, self._held, self._life, self._db
        flag = self._wake.flag
        db.bind()
        while life.state == "running":
            free, count, idle, retake = held.claim_room()
            if free <= 0 or (count > 0 and free < held.worth_claiming()):
                self._pause(config.poll_ms / 1000)
                continue
            retry_in = db.retry_in()
            if retry_in > 0:
                # The database is away: wait for this process's next try.
                # A settle or a wake cannot make it sooner.
                self._pause(retry_in)
                continue
            limit = min(free, config.claim_batch)
            db.refresh()
            try:
                capped = self._capped_room()
                # See claim(): a capped worker whose last claim found no
                # uncapped row skips that statement for a poll interval or
                # until a wake.
                uncapped = time.monotonic() >= self._wake.uncapped_after
                if not uncapped and capped == 0:
                    self._pause(config.poll_ms / 1000)
                    continue
                # start_now: how many claimed rows will start at once: idle
                # slots (attempts held but not yet run occupy one each,
                # running or queued), and no more than the chunks a full
                # claim makes. The claim records those as started; the rest
                # are held ahead, and a crash before they start costs them
                # no attempt.
                claimed, buried = self.claim(
                    limit,
                    start_now=min(idle, -(-limit // self._slots.chunk_size(limit))),
                    retake=retake,
                    capped=capped,
                    uncapped=uncapped,
                )
            except Exception as error:
                if not db.failed(error):
                    logger.exception(
                        "jobs.worker.tick-failed", extra={"worker_id": self._worker_id}
                    )
                    self._pause(config.poll_ms / 1000)
                continue
            if buried:
                announce_buried(buried)
            if claimed or buried:
                self._wake.backoff.reset()
                if (
                    not claimed
                    or self.capped
                    or self._limiter is not None
                    or len(claimed) + len(buried) >= limit
                ):
                    self._slots.dispatch(claimed)
                    continue
                # A short claim took every row due now: the next one comes on
                # a wake (an enqueue's NOTIFY, a settle freeing capacity) or
                # the poll floor, not at once. The immediate empty claim held
                # the GIL and a core while the slots started what this one
                # claimed (half of an idle worker's claim -> handler time).
                # Not for a capped or limited worker: its claims are short by
                # design (fleet-wide slots, a rotating key scan, the limiter's
                # room) and the next one finds more.
            # The wait is worked out before the slots get the claimed rows:
            # from the hand-over until this thread blocks, the slot that
            # starts them waits for the GIL (bench/README.md, pickup).
            wait = self._idle_wait()
            self._slots.dispatch(claimed)
            if config.burst and held.count() == 0:
                life.request_stop(reason="burst")
                break
            flag.wait(wait)
            flag.clear()

    def on_wake(self, queue_name: str) -> None:
        """A NOTIFY (or an in-process enqueue) for ``queue_name``: claim at once."""
        if not queue_name or queue_name in self._config.queues:
            wake = self._wake
            wake.uncapped_after = 0.0
            wake.backoff.reset()
            wake.flag.set()

    def refresh_registry_in_passing(self) -> None:
        """The next claim refreshes this worker's registry row (an idle keeper's ask)."""
        self._registry_due = True

    def _idle_wait(self) -> float:
        # A rate window that frees up sends no wake: a tenant held back by
        # rate_per_tenant is claimed again at its window's end, not on the
        # idle poll (which made the effective rate limit/(window + poll)).
        wait = self._wake.backoff.next_wait()
        if self._limiter is not None:
            window = self._limiter.next_window_in()
            if window is not None:
                wait = min(wait, window + 0.001)
        return wait

    def _pause(self, seconds: float) -> None:
        # Always clear after waiting: a wake left set would turn every later
        # wait into a spin (the first wave's claim loop retried a failed
        # claim ~500 times a second once a settle had set it).
        flag = self._wake.flag
        flag.wait(seconds)
        flag.clear()

    # -- capped rows ---------------------------------------------------------------

    def _capped_room(self) -> int:
        # Capped rows hold their fleet-wide slot from the claim, so one held
        # here waiting for a thread keeps its key from every other worker:
        # at most CAPPED_AHEAD rows per thread ahead, and only while jobs are
        # short (a long job gains nothing from being held ahead).
        if not self.capped:
            return 0
        ahead = self._capped_ahead()
        # Runs whose settle is not written yet count as held: their settle
        # hands each slot to its key's next row (handover), and a claim
        # taking that room first left the heirs out (claims of a few rows
        # each, a statement per key's run: bench/limits.py's capped fleet
        # spent its database CPU on them).
        busy = self._held.capped_busy()
        room = max(0, self._config.concurrency + ahead - busy)
        # While threads have rows queued, claim when half the ahead room is
        # free, not per settled run (a claim per run was the bottleneck).
        if busy > self._config.concurrency and room < max(1, ahead // 2):
            return 0
        return room

    def _capped_ahead(self) -> int:
        short = self._held.mean_ms < SHORT_JOB_MS
        return CAPPED_AHEAD * self._config.concurrency if short else 0

    def _capped_room_now(self) -> int:
        # Idle slots plus the capped rows that may wait ahead, minus those
        # waiting now.
        held = self._held
        return max(0, held.idle_slots() + self._capped_ahead() - held.held_ahead())

    def handover(self, settling: Sequence[ClaimedJob]) -> Handover | None:
        """How many rows the settle of ``settling`` may claim with the slots it frees."""
        # A settle of a capped row hands its slot to the key's next ready
        # row (job_ack_many_handover) while this worker has room for it as
        # for a capped claim: the key's next run then waits for no claim
        # (the settle-to-claim gap was a quarter of a key's cycle in
        # bench/limits.py). Not with a driver that cannot (its acks claim no
        # heir), in-process limits (the heir would pass no admission), a
        # recycling worker's budget, nor outside the threaded loop (tick()
        # runs nothing it did not claim itself).
        #
        # A key keeps its slot here for HANDOVER_TENURE runs in a row, then
        # lets it go to whichever claim comes next: without turns, the keys
        # a worker happened to hold ran their backlog out first and the
        # others' backlog was left to run one key at a time at the end
        # (bench/limits.py drained 4,000 jobs/s, then 1,600 for its last
        # third). The count of a settling key is taken out here and put
        # back only for a key that gets an heir (take_heirs).
        self._held.settle_tenure(settling)
        if (
            not self.capped
            or not self.driver.features.slot_handover
            or self._limiter is not None
            or self._config.max_jobs is not None
            or self._life.state != "running"
            or not self._slots.started
        ):
            return None
        room = self._capped_room_now()
        if room <= 0:
            return None
        return Handover(
            queues=self._config.queues,
            limit=room,
            worker_id=self._worker_id,
            visibility_ms=self._config.visibility_ms,
            release=self._held.tenure_spent(),
        )

    def take_heirs(self, claimed: list[ClaimedJob]) -> None:
        """Hold and dispatch the rows a settle claimed with the slots it held."""
        # Rows a settle claimed with the slot it held (see handover): held
        # and run as a claim's rows are.
        self._slots.dispatch(self._held.take_heirs(claimed))

    # -- one claim -----------------------------------------------------------------

    def claim(
        self,
        limit: int,
        *,
        start_now: int = 0,
        retake: int | None = None,
        capped: int | None = None,
        uncapped: bool = True,
    ) -> tuple[list[Attempt], list[Any]]:
        """Claim up to ``limit`` rows and hold them; answer (attempts, buried rows).

        ``capped``: how many rows carrying a concurrency key to claim, each
        with its fleet-wide slot (None: up to the limit, the inline tick).
        ``start_now``: how many of them the claim records as started.
        """
        queues, skip = self._config.queues, frozenset[str | None]()
        if self._limiter is not None:
            # In-process limits (worker/limits.py) bound the whole claim,
            # capped rows included.
            queues, limit, skip = self._limited(limit)
            if limit <= 0:
                return [], []
            capped = limit if capped is None else min(capped, limit)
        registry_ttl = None
        if self._registry_due and self._held.count() == 0:
            registry_ttl = self._config.visibility_ms
            self._registry_due = False
        options = ClaimOptions(
            queues=queues,
            limit=limit,
            worker_id=self._worker_id,
            visibility_ms=self._config.visibility_ms,
            drop_exhausted=self._drop_names,
            registry_ttl_ms=registry_ttl,
            start_now=start_now,
            retake=retake,
            skip_tenants=skip,
            capped=(limit if capped is None else capped) if self.capped else 0,
            uncapped=uncapped,
            refuse_busy=self._refuse_busy,
        )
        result = self.driver.claim(options)
        if (
            self.capped
            and uncapped
            and len(result.claimed) < limit
            and not skip
            and queues == self._config.queues
        ):
            # The claim had room and no uncapped row came back: the next
            # claims leave the ordinary statement out for a poll interval, or
            # until a wake (a NOTIFY on enqueue) says a row came. Not when the
            # limiter left tenants or queues out: their rows are there, and
            # skipping the statement kept a full tenant's flood waiting a
            # poll or more after its limit freed (4 jobs per ~1 s).
            if all(c.concurrency_key is not None for c in result.claimed):
                self._wake.uncapped_after = (
                    time.monotonic() + self._config.poll_ms / 1000
                )
        if not self.capped and uncapped and self._stranded_due(result):
            result = self._claim_stranded(result, options)
        # The claim landed (a shed below may still find the connection gone).
        self._db.ok()
        if result.claimed:
            fault_point(AFTER_CLAIM_COMMIT)
        shed: list[tuple[ClaimedJob, str | None]] = []
        attempts = self._held.take(result.claimed, shed)
        for claimed, blocked_by in shed:
            self._shed(claimed, blocked_by)
        return attempts, result.buried

    def _stranded_due(self, result: ClaimResult) -> bool:
        # Rows enqueued with a concurrency key by a release that declared
        # concurrency= (removed since) are left out by job_claim, and a
        # worker whose registry declares no cap never runs the capped claim:
        # nothing would ever claim them. So such a worker also runs it on its
        # first claim and then once every STRANDED_SWEEP_S, busy or idle: an
        # idle worker's cost stays one statement a minute (not one per poll),
        # and stranded rows start at most a minute after the deploy.
        # A burst worker (and run_jobs()) sweeps on every empty claim too:
        # it exits on one, and must not leave such rows behind.
        now = time.monotonic()
        empty = not (result.claimed or result.buried)
        if now < self._stranded_at and not (self._config.burst and empty):
            return False
        self._stranded_at = now + STRANDED_SWEEP_S
        return True

    def _claim_stranded(
        self,
        result: ClaimResult,
        first: ClaimOptions,
    ) -> ClaimResult:
        room = min(first.limit - len(result.claimed), self._config.concurrency)
        if room <= 0:
            return result
        # The rows' own key and limit decide their slots; no uncapped row.
        found = self.driver.claim(
            dataclasses.replace(
                first,
                limit=room,
                capped=room,
                uncapped=False,
                retake=self._held.retake(),
                registry_ttl_ms=None,
                start_now=0,
            )
        )
        if found.claimed and not self._stranded_logged:
            self._stranded_logged = True
            logger.warning(
                "jobs.worker.capped-rows-undeclared",
                extra={
                    "worker_id": self._worker_id,
                    "jobs": sorted({c.name for c in found.claimed}),
                },
            )
        return ClaimResult(result.claimed + found.claimed, result.buried)

    # -- in-process limits ---------------------------------------------------------

    def _limited(
        self, limit: int
    ) -> tuple[tuple[str, ...], int, frozenset[str | None]]:
        # The claim names only the queues below their limit, takes no more
        # rows than the tightest room (a tenant with room for one must not
        # get a batch of its rows, shed one write each), and skips the
        # tenants that are full, in SQL: behind one tenant's flood the scan
        # reaches the next tenant's rows (job_claim, claim_tenant_open).
        #
        # Every other claim also skips the tenants that run some jobs here:
        # one with room for one would otherwise shrink every claim to one
        # row, and a tenant arriving behind a flood got its rows one small
        # claim at a time, each scanning past the flood (B's 20 jobs took
        # 2 s under per_tenant 4). On those turns a fresh tenant gets a full
        # claim; on the others the partly used ones get their room.
        assert self._limiter is not None
        queues = self._limiter.open_queues(self._config.queues)
        partial = frozenset[str | None]()
        if self._fresh_turn:
            partial = self._limiter.partial_tenants()
        self._fresh_turn = not self._fresh_turn
        room = self._limiter.claim_room(queues, without=partial)
        if not queues or (room is not None and room <= 0):
            return queues, 0, frozenset()
        limit = limit if room is None else min(limit, room)
        return queues, limit, self._limiter.full_tenants() | partial

    def _shed(self, claimed: ClaimedJob, blocked_by: str | None) -> None:
        # A row over a limit (a lapsed lease the claim re-took for a full
        # tenant: that scan is not filtered) is handed back at once without
        # spending its attempt, and with no delay (its place in the claim
        # order is kept). One write in the claim thread, outside the lock:
        # rare, and the settler is not needed for it. A failed write must
        # not lose the rows this claim admitted (they are held already): the
        # claim role reports it (a lost connection is reset, and an outage
        # paces the next claim), and the row is left to its lease, whose
        # lapse costs no attempt (a re-taken row's start is recorded only
        # before its body).
        logger.info(
            "jobs.limits.shed",
            extra={
                **job_fields(claimed),
                "tenant": claimed.tenant_id,
                "blocked_by": blocked_by,
            },
        )
        try:
            self.driver.nack(
                NackRequest(
                    job_id=claimed.id,
                    identity=claimed.identity,
                    counts_as_attempt=False,
                )
            )
        except Exception as error:
            if not self._db.failed(error):
                logger.warning(
                    "jobs.limits.shed-failed",
                    extra=job_fields(claimed),
                    exc_info=True,
                )
