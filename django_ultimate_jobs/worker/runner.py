"""The worker: claim loop, slot threads, settler, lease keeper, drain.

Threads of one worker process:

- the claim loop (the thread that calls :meth:`Worker.run`) claims up to the
  free capacity in one statement and hands attempts to the slots;
- ``concurrency`` slot threads run bodies through :func:`run_attempt`;
- one settler thread writes settlements in batches (:class:`Settler`);
- one keeper thread renews leases in one statement per interval, cancels
  attempts whose lease is lost, fires attempt deadlines and the drain
  cut-off;
- optionally the LISTEN thread (``driver.wake_listener()``), which only
  makes the next poll sooner.

Each thread has its own Django connection, named for its role and reset
after a loss (``driver.sessions``): when the database goes away, every role
reconnects on its next use, on one process-wide backoff, and the settler
keeps finished work until it can write it. :meth:`Worker.tick` runs one
claim pass inline in the caller's thread: the test helper uses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any
from uuid import UUID

from django.db import connections

from ..conf import jobs_settings
from ..context import CancellationToken
from ..drivers import get_driver
from ..drivers.base import (
    ClaimedJob,
    ClaimOptions,
    ClaimResult,
    Handover,
    JobDriver,
    NackRequest,
    WorkerRecord,
)
from ..drivers.djangodb import (
    close_thread_connections,
    drop_dead_connections,
    is_connection_gone,
    is_database_away,
    reset_broken_connections,
    sqlstate,
)
from ..drivers.outage import process_outage
from ..drivers.postgres.sessions import RoleConnection, recover
from ..errors import (
    Draining,
    JobKeyBusy,
    JobLeaseLost,
    JobSlotLost,
    JobTimeout,
)
from ..faults import AFTER_CLAIM_COMMIT, BEFORE_OUTCOME_WRITE, fault_point
from ..registry import get_job, registered_jobs
from ..signals import job_started
from ..wake import wake_hub
from .backoff import IdleBackoff
from .config import WorkerConfig
from .executor import Attempt, Execution, run_attempt, settle_for
from .limits import Lease, Limiter
from .settler import Settler
from .wakeflag import WakeFlag

__all__ = ["Worker", "new_worker_id"]

logger = logging.getLogger("django_ultimate_jobs")

_STOP: Any = object()
_SETTLE_BATCH = 256
_SETTLE_GATHER_S = 0.002
DRAIN_CANCEL_MARGIN_S = 2.0
COUNTER_ROLLUP_INTERVAL_S = 600.0
DATABASE_AWAY_RETRY_MS = 1_000
"""When a job whose connection dropped under its body runs again."""
SHORT_JOB_MS = 50
"""Below this mean attempt duration a worker claims a whole batch ahead."""
STRANDED_SWEEP_S = 60.0
"""How often, under a backlog, a worker whose registry declares no
``concurrency=`` still claims rows queued with a concurrency key (it always
does when its claim comes back empty)."""
CHUNK_BELOW_MS = 1.0
"""Below this mean attempt duration claimed jobs reach the slots in chunks."""
CHUNK_MIN = 16
"""The smallest chunk: fewer slots woken, as no-op bodies gain nothing from threads."""
CHUNK_YIELD_S = 0.005
"""A job in a chunk that runs longer has the rest of its chunk moved to other slots."""
SETTLE_RETRIES = 5
"""Retries of a settle that lost a deadlock or a serialization conflict."""
_TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock, serialization
HANDOVER_TENURE = 6
"""Runs in a row a capped key's slot goes to by hand-over before it is let go."""
CAPPED_AHEAD = 4
"""Capped rows held per thread beyond the running ones while jobs are short.

Measured with bench/limits.py (keyed limit 1, 100 keys, 3 x 8 threads, settles
handing slots over): 1 per thread drained 0.53x the uncapped rate, 2 0.64-0.72x,
3 0.73-0.77x, 4 0.80-0.81x, 6 0.74x. A key held ahead waits in this worker,
but a key nobody holds waits for a claim to reach it, and each settle hands
a held key its next run at once: the fleet should hold about every key with
a backlog. Below the uncapped claim's whole batch (claim_batch, 64).
"""


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
        self.state = "idle"
        self.drain_token = CancellationToken()
        self.backoff = IdleBackoff(
            config.poll_ms / 1000,
            config.idle_max_ms / 1000,
            config.woken_idle_max_ms / 1000,
        )
        self.processed = 0
        self._claimed_total = 0  # attempts of known jobs, for max_jobs
        self.counts: dict[str, int] = {}
        self.exit_reason: str | None = None
        self._lock = threading.Lock()
        self._held: dict[UUID, Attempt] = {}
        # Held attempts whose bodies have run and whose settle is queued or
        # in flight: they no longer occupy a slot, so the next claim may
        # overlap their settle (claim and ack then run on two connections at
        # once instead of taking turns).
        self._ran: set[UUID] = set()
        # Per slot: the rest of its chunk, what of it already ran (settled
        # together at the chunk's end), and when its current job started.
        # The keeper moves both on once a job runs long (_rebalance_chunks).
        self._chunk_lock = threading.Lock()
        self._chunk_rest: list[deque[Attempt]] = [
            deque() for _ in range(config.concurrency)
        ]
        self._chunk_ran: list[list[Execution]] = [[] for _ in range(config.concurrency)]
        self._chunk_job_started: list[float | None] = [None] * config.concurrency
        self._stuck = 0
        self._suspects = _OneAtATime()
        self._wake = WakeFlag()
        self._slots: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._settles: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._keeper_stop = threading.Event()
        self._registry_due = True
        self._announced = False
        self._mean_ms = float(SHORT_JOB_MS)  # cautious until jobs are measured
        self._cutoff_at: float | None = None
        self._handback_at: float | None = None
        self._deadline_at: float | None = None
        self._settle_retries = 0
        """Retries in a row of a settle that lost a deadlock (_write_settles)."""
        self._settler = Settler(
            self.driver,
            on_done=self._settled,
            handover=self._handover,
            on_heirs=self._take_heirs,
        )
        # In-process limits (worker/limits.py); None when none is set, so a
        # worker without limits claims exactly as before.
        self._limiter = Limiter(config.limits) if config.limits.active else None
        self._fresh_turn = True
        """Whether the next limited claim skips partly used tenants (_limited)."""
        self._leases: dict[UUID, Lease] = {}
        self.outage = process_outage()
        """Shared by every role of this process (and its lock keeper): one
        backoff, one log line each way."""
        self._claim_db = self.role("claim")
        self._settle_db = self.role("settle")
        self._keep_db = self.role("keep")
        handles = registered_jobs()
        self._drop_names = frozenset(h.name for h in handles if not h.retry.dead_letter)
        # Rows of a job declaring concurrency= carry a lease key and are
        # claimed only with a fleet-wide slot, by a second statement that a
        # process declaring no limit never runs (its claim is unchanged). Any
        # declared limit turns it on, whatever the job's queue: a queue can
        # be chosen per enqueue (using(queue=...)).
        self._capped = any(h.concurrency is not None for h in handles)
        if self._capped:
            # A slot freed by a settle elsewhere, or by a dead holder's lease
            # passing, sends no NOTIFY: rows waiting for it are found by
            # polling, so a proven wake must not stretch the idle wait to
            # WOKEN_IDLE_POLL_MAX (a lapsed slot came back 5 s late).
            self.backoff.woken_ceiling_s = self.backoff.ceiling_s
        self._refuse_busy = frozenset(
            h.name
            for h in handles
            if h.concurrency is not None and h.concurrency.when_busy == "fail"
        )
        self._uncapped_after = 0.0
        self._stranded_at = 0.0
        self._stranded_logged = False
        self._tenure: dict[str, int] = {}
        """Per concurrency key: the runs its slot went to by hand-over in a row."""
        self._tenure_settling: dict[str, int] = {}
        """The counts of the keys the settle being written may hand over."""
        """Monotonic time before which a capped worker skips the uncapped claim."""
        self._rolled_up_at = time.monotonic()
        self._processed_at_rollup = 0

    def role(self, name: str) -> RoleConnection:
        """A database role of this worker process (bind it in its own thread)."""
        return RoleConnection(
            name,
            using=jobs_settings().database,
            worker_id=self.id,
            outage=self.outage,
        )

    # -- one pass, inline (tests) ----------------------------------------------

    def tick(self) -> list[Execution]:
        """Claim once and run every claimed job in this thread; return them.

        The same claim, executor and settler as the threaded loop, so a test
        exercises the real path. Timeouts cancel the token from a timer.
        """
        claimed, buried = self._claim(self.config.claim_batch)
        self._settler.announce_buried(buried)
        executions: list[Execution] = []
        for attempt in claimed:
            if attempt.handle is None:
                executions.append(self._park_unknown(attempt))
                continue
            if attempt.claimed.key_busy:
                executions.append(self._refuse(attempt))
                continue
            if not self._mark_started(attempt):
                executions.append(_not_started(attempt))
                continue
            attempt.start()
            timer = self._deadline_timer(attempt)
            try:
                self._send_started(attempt)
                execution = run_attempt(attempt, self.driver)
            finally:
                if timer is not None:
                    timer.cancel()
            if execution is not None:
                executions.append(execution)
        try:
            self._settler.settle(executions)
        except Exception:
            logger.exception("jobs.worker.settle-failed")
            reset_broken_connections()
            self._settler.give_up(executions)
        return executions

    # -- the threaded loop -----------------------------------------------------

    def run(self, *, install_signals: Callable[[Worker], None] | None = None) -> int:
        """Run until stopped (or idle with ``burst``); return an exit code."""
        self.state = "running"
        self._start_threads()
        unsubscribe = wake_hub.subscribe(self._on_wake)
        if install_signals is not None:
            install_signals(self)
        logger.info(
            "jobs.worker.started",
            extra={"worker_id": self.id, "queues": list(self.config.queues)},
        )
        try:
            self._loop()
        finally:
            unsubscribe()
            self._finish()
        return 0

    def request_stop(
        self, deadline_s: float | None = None, reason: str = "signal"
    ) -> None:
        """Stop claiming now; running jobs get until the deadline (drain)."""
        with self._lock:
            if self.state in ("draining", "stopped"):
                return
            self.state = "draining"
            self.exit_reason = reason
            budget = (
                self.config.shutdown_deadline_ms / 1000
                if deadline_s is None
                else deadline_s
            )
            now = time.monotonic()
            margin = min(DRAIN_CANCEL_MARGIN_S, budget / 2)
            self._deadline_at = now + budget
            self._cutoff_at = self._deadline_at - margin
            self._handback_at = self._deadline_at - margin / 2
        logger.info(
            "jobs.worker.draining", extra={"worker_id": self.id, "deadline_s": budget}
        )
        self._wake.set()

    def held_count(self) -> int:
        """Attempts claimed and not yet settled."""
        with self._lock:
            return len(self._held)

    def _free_capacity(self) -> int:
        """Room for new claims (see :meth:`_free_locked`)."""
        with self._lock:
            return self._free_locked()

    def _claim_room(self) -> tuple[int, int, int, int]:
        # What the claim loop reads before each claim, under one acquire of
        # the lock (four helpers taking it in turn were a fifth of the Python
        # between an idle worker's wake and its claim): the free capacity
        # (_free_locked), the attempts held, the idle slots (_idle_slots) and
        # the re-take allowance (_retake).
        with self._lock:
            held = len(self._held)
            busy = held - len(self._ran) + self._stuck
            retake = 1
            if held:
                for attempt in self._held.values():
                    if attempt.claimed.retaken and not attempt.settled:
                        retake = 0
                        break
            return (
                self._free_locked(),
                held,
                max(0, self.config.concurrency - busy),
                retake,
            )

    def _free_locked(self) -> int:
        # Slots plus claim-ahead, minus attempts not yet run; settles in
        # flight are bounded by one settle batch more. Call with the lock held.
        held = len(self._held)
        capacity = self._capacity()
        free = min(
            capacity - (held - len(self._ran)) - self._stuck,
            capacity + _SETTLE_BATCH - held,
        )
        if self.config.max_jobs is not None:
            # A recycling worker claims no more than it may run.
            free = min(free, self.config.max_jobs - self._claimed_total)
        return free

    def _capacity(self) -> int:
        # Jobs held beyond the running slots, so slots never wait on a claim
        # round trip: a whole claim batch while jobs are short (their leases
        # are settled within milliseconds). None once they are not: a claim
        # round trip is small beside such a job, long jobs are not hoarded
        # away from other workers, and a row `running` in the database is a
        # body running (an operator reading the table during an incident is
        # not misled by jobs that only wait in a worker).
        short = self._mean_ms < SHORT_JOB_MS
        ahead = self.config.claim_batch if short else 0
        return self.config.concurrency + ahead

    def _worth_claiming(self) -> int:
        # A claim waits until three quarters of what may be held ahead is
        # free, rather than paying a round trip for a few rows: claims
        # overlap settles now, so a claim of half a batch came too early.
        return max(1, (self._capacity() - self.config.concurrency) * 3 // 4)

    def _loop(self) -> None:
        generic = getattr(self.driver, "use_generic_plans_in_this_thread", None)
        if generic is not None:
            generic()  # this thread claims, and does nothing else
        self._claim_db.bind()
        while self.state == "running":
            free, held, idle, retake = self._claim_room()
            if free <= 0 or (held > 0 and free < self._worth_claiming()):
                self._pause(self.config.poll_ms / 1000)
                continue
            retry_in = self._claim_db.retry_in()
            if retry_in > 0:
                # The database is away: wait for this process's next try.
                # A settle or a wake cannot make it sooner.
                self._pause(retry_in)
                continue
            limit = min(free, self.config.claim_batch)
            self._claim_db.refresh()
            try:
                capped = self._capped_room()
                uncapped = self._uncapped_due()
                if not uncapped and capped == 0:
                    self._pause(self.config.poll_ms / 1000)
                    continue
                # start_now: how many claimed rows will start at once: idle
                # slots (attempts held but not yet run occupy one each,
                # running or queued), and no more than the chunks a full
                # claim makes. The claim records those as started; the rest
                # are held ahead, and a crash before they start costs them
                # no attempt.
                claimed, buried = self._claim(
                    limit,
                    start_now=min(idle, -(-limit // self._chunk_size(limit))),
                    retake=retake,
                    capped=capped,
                    uncapped=uncapped,
                )
            except Exception as error:
                if not self._claim_db.failed(error):
                    logger.exception(
                        "jobs.worker.tick-failed", extra={"worker_id": self.id}
                    )
                    self._pause(self.config.poll_ms / 1000)
                continue
            if buried:
                self._settler.announce_buried(buried)
            if claimed or buried:
                self.backoff.reset()
                if (
                    not claimed
                    or self._capped
                    or self._limiter is not None
                    or len(claimed) + len(buried) >= limit
                ):
                    self._dispatch(claimed)
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
            self._dispatch(claimed)
            if self.config.burst and self.held_count() == 0:
                self.request_stop(reason="burst")
                break
            self._wake.wait(wait)
            self._wake.clear()

    def _idle_wait(self) -> float:
        # A rate window that frees up sends no wake: a tenant held back by
        # rate_per_tenant is claimed again at its window's end, not on the
        # idle poll (which made the effective rate limit/(window + poll)).
        wait = self.backoff.next_wait()
        if self._limiter is not None:
            window = self._limiter.next_window_in()
            if window is not None:
                wait = min(wait, window + 0.001)
        return wait

    def _pause(self, seconds: float) -> None:
        # Always clear after waiting: a wake left set would turn every later
        # wait into a spin (the first wave's claim loop retried a failed
        # claim ~500 times a second once a settle had set it).
        self._wake.wait(seconds)
        self._wake.clear()

    def _chunk_size(self, count: int) -> int:
        # Very short jobs reach the slots in chunks of at least CHUNK_MIN:
        # waking a slot thread costs more than running a no-op job, and a
        # wake per job was the claim loop's largest cost. The keeper moves
        # a chunk's rest to other slots once one of its jobs proves long.
        if self._mean_ms < CHUNK_BELOW_MS:
            return max(CHUNK_MIN, -(-count // self.config.concurrency))
        return 1

    def _uncapped_due(self) -> bool:
        # See _claim: a capped worker whose last claim found no uncapped row
        # skips that statement for a poll interval or until a wake.
        return time.monotonic() >= self._uncapped_after

    def _capped_room(self) -> int:
        # Capped rows hold their fleet-wide slot from the claim, so one held
        # here waiting for a thread keeps its key from every other worker:
        # at most CAPPED_AHEAD rows per thread ahead, and only while jobs are
        # short (a long job gains nothing from being held ahead).
        if not self._capped:
            return 0
        ahead = self._capped_ahead()
        # Runs whose settle is not written yet count as held: their settle
        # hands each slot to its key's next row (_handover), and a claim
        # taking that room first left the heirs out (claims of a few rows
        # each, a statement per key's run: bench/limits.py's capped fleet
        # spent its database CPU on them).
        with self._lock:
            busy = len(self._held) + self._stuck
        room = max(0, self.config.concurrency + ahead - busy)
        # While threads have rows queued, claim when half the ahead room is
        # free, not per settled run (a claim per run was the bottleneck).
        if busy > self.config.concurrency and room < max(1, ahead // 2):
            return 0
        return room

    def _capped_ahead(self) -> int:
        short = self._mean_ms < SHORT_JOB_MS
        return CAPPED_AHEAD * self.config.concurrency if short else 0

    def _capped_room_now(self) -> int:
        # Idle slots plus the capped rows that may wait ahead, minus those
        # waiting now.
        return max(0, self._idle_slots() + self._capped_ahead() - self._held_ahead())

    def _handover(self, settling: Sequence[ClaimedJob]) -> Handover | None:
        # A settle of a capped row hands its slot to the key's next ready
        # row (job_ack_many_handover) while this worker has room for it as
        # for a capped claim: the key's next run then waits for no claim
        # (the settle-to-claim gap was a quarter of a key's cycle in
        # bench/limits.py). Not with in-process limits (the heir would pass
        # no admission), a recycling worker's budget, nor outside the
        # threaded loop (tick() runs nothing it did not claim itself).
        #
        # A key keeps its slot here for HANDOVER_TENURE runs in a row, then
        # lets it go to whichever claim comes next: without turns, the keys
        # a worker happened to hold ran their backlog out first and the
        # others' backlog was left to run one key at a time at the end
        # (bench/limits.py drained 4,000 jobs/s, then 1,600 for its last
        # third). The count of a settling key is taken out here and put
        # back only for a key that gets an heir (_take_heirs): the map holds
        # the keys this worker runs by hand-over now, never every key seen.
        with self._lock:
            self._tenure_settling = {
                key: self._tenure.pop(key)
                for key in {row.concurrency_key for row in settling}
                if key is not None and key in self._tenure
            }
        if (
            not self._capped
            or self._limiter is not None
            or self.config.max_jobs is not None
            or self.state != "running"
            or not self._threads
        ):
            return None
        room = self._capped_room_now()
        if room <= 0:
            return None
        return Handover(
            queues=self.config.queues,
            limit=room,
            worker_id=self.id,
            visibility_ms=self.config.visibility_ms,
            release=[
                key
                for key, runs in self._tenure_settling.items()
                if runs >= HANDOVER_TENURE
            ],
        )

    def _take_heirs(self, claimed: list[ClaimedJob]) -> None:
        # Rows a settle claimed with the slot it held (see _handover): held
        # and run as a claim's rows are.
        attempts = []
        with self._lock:
            for row in claimed:
                key = row.concurrency_key
                if key is not None:
                    self._tenure[key] = self._tenure_settling.get(key, 0) + 1
                attempt = Attempt(row, get_job(row.name))
                self._held[row.id] = attempt
                attempts.append(attempt)
                if attempt.handle is not None:
                    self._claimed_total += 1
        self._dispatch(attempts)

    def _held_ahead(self) -> int:
        with self._lock:
            busy = len(self._held) - len(self._ran) + self._stuck
        return max(0, busy - self.config.concurrency)

    def _idle_slots(self) -> int:
        with self._lock:
            busy = len(self._held) - len(self._ran) + self._stuck
        return max(0, self.config.concurrency - busy)

    def _retake(self) -> int:
        # One suspect (a re-taken lapsed lease) held at a time: suspects run
        # one at a time anyway (_OneAtATime), and one held waiting for its
        # turn would lapse again if the running one killed the process.
        with self._lock:
            held = list(self._held.values())
        return 0 if any(a.claimed.retaken and not a.settled for a in held) else 1

    def _dispatch(self, claimed: list[Attempt]) -> None:
        heads: list[Attempt] = []
        rest: list[Attempt] = []
        for attempt in claimed:
            if attempt.handle is None:
                self._settles.put([self._park_unknown(attempt)])
            elif attempt.claimed.key_busy:
                self._settles.put([self._refuse(attempt)])
            elif attempt.claimed.start_recorded:
                heads.append(attempt)
            else:
                rest.append(attempt)
        # The rows the claim recorded as started go first, each at the head
        # of its own chunk, so idle slots start them at once.
        size = self._chunk_size(len(heads) + len(rest))
        if not heads or size == 1:
            items = [[a] for a in heads]
            items += [rest[i : i + size] for i in range(0, len(rest), size)]
        else:
            share = -(-len(rest) // len(heads))
            items = [
                [head, *rest[i * share : (i + 1) * share]]
                for i, head in enumerate(heads)
            ]
        for item in items:
            self._slots.put(item)

    def _claim(
        self,
        limit: int,
        *,
        start_now: int = 0,
        retake: int | None = None,
        capped: int | None = None,
        uncapped: bool = True,
    ) -> tuple[list[Attempt], list[Any]]:
        # capped: how many rows carrying a concurrency key to claim, each
        # with its fleet-wide slot (None: up to the limit, the inline tick).
        queues, skip = self.config.queues, frozenset[str | None]()
        if self._limiter is not None:
            # In-process limits (worker/limits.py) bound the whole claim,
            # capped rows included.
            queues, limit, skip = self._limited(limit)
            if limit <= 0:
                return [], []
            capped = limit if capped is None else min(capped, limit)
        registry_ttl = None
        if self._registry_due and self.held_count() == 0:
            registry_ttl = self.config.visibility_ms
            self._registry_due = False
        options = ClaimOptions(
            queues=queues,
            limit=limit,
            worker_id=self.id,
            visibility_ms=self.config.visibility_ms,
            drop_exhausted=self._drop_names,
            registry_ttl_ms=registry_ttl,
            start_now=start_now,
            retake=retake,
            skip_tenants=skip,
            capped=(limit if capped is None else capped) if self._capped else 0,
            uncapped=uncapped,
            refuse_busy=self._refuse_busy,
        )
        result = self.driver.claim(options)
        if (
            self._capped
            and uncapped
            and len(result.claimed) < limit
            and not skip
            and queues == self.config.queues
        ):
            # The claim had room and no uncapped row came back: the next
            # claims leave the ordinary statement out for a poll interval, or
            # until a wake (a NOTIFY on enqueue) says a row came. Not when the
            # limiter left tenants or queues out: their rows are there, and
            # skipping the statement kept a full tenant's flood waiting a
            # poll or more after its limit freed (4 jobs per ~1 s).
            if all(c.concurrency_key is not None for c in result.claimed):
                self._uncapped_after = time.monotonic() + self.config.poll_ms / 1000
        if not self._capped and uncapped and self._stranded_due(result):
            result = self._claim_stranded(result, options)
        # The claim landed (a shed below may still find the connection gone).
        self._claim_db.ok()
        if result.claimed:
            fault_point(AFTER_CLAIM_COMMIT)
        attempts = []
        shed: list[tuple[ClaimedJob, str | None]] = []
        with self._lock:
            for claimed in result.claimed:
                if self._limiter is not None and not self._admit(claimed):
                    shed.append((claimed, self._limiter.last_refusal))
                    continue
                if claimed.concurrency_key is not None:
                    self._tenure.pop(claimed.concurrency_key, None)
                attempt = Attempt(claimed, get_job(claimed.name))
                self._held[claimed.id] = attempt
                attempts.append(attempt)
                if attempt.handle is not None:
                    self._claimed_total += 1
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
        if now < self._stranded_at and not (self.config.burst and empty):
            return False
        self._stranded_at = now + STRANDED_SWEEP_S
        return True

    def _claim_stranded(
        self,
        result: ClaimResult,
        first: ClaimOptions,
    ) -> ClaimResult:
        room = min(first.limit - len(result.claimed), self.config.concurrency)
        if room <= 0:
            return result
        # The rows' own key and limit decide their slots; no uncapped row.
        found = self.driver.claim(
            dataclasses.replace(
                first,
                limit=room,
                capped=room,
                uncapped=False,
                retake=self._retake(),
                registry_ttl_ms=None,
                start_now=0,
            )
        )
        if found.claimed and not self._stranded_logged:
            self._stranded_logged = True
            logger.warning(
                "jobs.worker.capped-rows-undeclared",
                extra={
                    "worker_id": self.id,
                    "jobs": sorted({c.name for c in found.claimed}),
                },
            )
        return ClaimResult(result.claimed + found.claimed, result.buried)

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
        queues = self._limiter.open_queues(self.config.queues)
        partial = frozenset[str | None]()
        if self._fresh_turn:
            partial = self._limiter.partial_tenants()
        self._fresh_turn = not self._fresh_turn
        room = self._limiter.claim_room(queues, without=partial)
        if not queues or (room is not None and room <= 0):
            return queues, 0, frozenset()
        limit = limit if room is None else min(limit, room)
        return queues, limit, self._limiter.full_tenants() | partial

    def _admit(self, claimed: ClaimedJob) -> bool:
        # Call with the lock held: take the row's limits, or refuse it.
        assert self._limiter is not None
        lease = self._limiter.try_acquire(claimed.queue, claimed.tenant_id)
        if lease is not None:
            self._leases[claimed.id] = lease
        return lease is not None

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
                "job": claimed.name,
                "job_id": str(claimed.id),
                "queue": claimed.queue,
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
            if not self._claim_db.failed(error):
                logger.warning(
                    "jobs.limits.shed-failed",
                    extra={"job_id": str(claimed.id)},
                    exc_info=True,
                )

    def _release_limits(self, job_ids: list[UUID]) -> bool:
        # Call with the lock held; idempotent (a lease is popped once).
        # Whether any lease was released.
        released = False
        if not self._leases:
            return released
        for job_id in job_ids:
            lease = self._leases.pop(job_id, None)
            if lease is not None:
                lease.release()
                released = True
        return released

    def _park_unknown(self, attempt: Attempt) -> Execution:
        # Deploy skew: a newer release enqueued a job this one does not know.
        # Park it without spending an attempt; a worker that knows it will run it.
        from ..registry import unknown_job  # the cause names where it looked

        claimed = attempt.claimed
        attempt.take_settlement()
        nack = NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            delay_ms=self.config.unknown_park_ms,
            error=unknown_job(claimed.name).render(),
            counts_as_attempt=False,
            park=True,
        )
        logger.warning("jobs.worker.job-unknown", extra={"job": claimed.name})
        return Execution(claimed, "suspended", 0, None, nack=nack)

    def _refuse(self, attempt: Attempt) -> Execution:
        # when_busy="fail" and every live slot of the key is another job's
        # (job_claim_busy): the row settles failed, its body never runs, the
        # attempt is given back, and it is no dead letter (jobs retry
        # re-queues it).
        claimed = attempt.claimed
        attempt.take_settlement()
        error = JobKeyBusy(
            f"another run of {claimed.name} holds its concurrency key; "
            'when_busy="fail" refused this one without running it',
            meta={"job": claimed.name},
        )
        nack = NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            error=error.render(),
            counts_as_attempt=False,
            fail=True,
        )
        logger.info(
            "jobs.attempt.refused",
            extra={"job": claimed.name, "job_id": str(claimed.id)},
        )
        return Execution(claimed, "refused", 0, attempt.handle, nack=nack, error=error)

    def _on_wake(self, queue_name: str) -> None:
        if not queue_name or queue_name in self.config.queues:
            self._uncapped_after = 0.0
            self.backoff.reset()
            self._wake.set()

    def _send_started(self, attempt: Attempt) -> None:
        if attempt.handle is not None and job_started.listened_for(
            type(attempt.handle)
        ):
            # send_robust: a broken receiver must not cost the job its slot.
            answers = job_started.send_robust(
                sender=type(attempt.handle), job=attempt.handle, claimed=attempt.claimed
            )
            _log_receiver_errors("job_started", answers)

    # -- threads -----------------------------------------------------------------

    def _start_threads(self) -> None:
        for index in range(self.config.concurrency):
            self._spawn(f"uj-slot-{index}", partial(self._slot_main, index))
        self._spawn("uj-settler", self._settler_main)
        self._spawn("uj-keeper", self._keeper_main)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _slot_main(self, index: int) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        rest = self._chunk_rest[index]
        db = self.role("slot")
        db.bind()
        try:
            while True:
                chunk = self._slots.get()
                if chunk is _STOP:
                    return
                # A connection whose backend was terminated while the slot
                # waited is replaced now, not found dead by a body's first
                # query (once per chunk: no round trip unless the server
                # closed it).
                drop_dead_connections()
                with self._chunk_lock:
                    rest.extend(chunk)
                execution: Execution | None = None
                while True:
                    with self._chunk_lock:
                        if execution is not None:
                            self._chunk_ran[index].append(execution)
                        if not rest:
                            self._chunk_job_started[index] = None
                            finished = self._chunk_ran[index]
                            self._chunk_ran[index] = []
                            break
                        attempt = rest.popleft()
                        self._chunk_job_started[index] = time.monotonic()
                    execution = None
                    if attempt.settled:  # handed back by the drain before it started
                        continue
                    if self.state != "running" and attempt.take_settlement():
                        # Draining: what has not started is not started now.
                        self._settles.put([self._drained(attempt)])
                        continue
                    handle = attempt.handle  # known: unknown names are parked
                    if handle is not None and handle.is_async and loop is None:
                        loop = asyncio.new_event_loop()
                    execution = self._run_in_slot(attempt, loop, db)
                # One hand-over per chunk: the settler thread is woken once,
                # not once per job.
                self._hand_to_settler(finished)
        finally:
            if loop is not None:
                loop.close()
            connections.close_all()

    def _rebalance_chunks(self, now: float) -> None:
        # A chunk is a bet that its jobs are short. When the job a slot runs
        # has taken longer than CHUNK_YIELD_S, the rest of its chunk goes
        # back to the shared queue, one job per item, for the other slots,
        # and what already ran goes to the settler: a long job delays its
        # chunk-mates, and their settles, by one keeper tick, not its run.
        moved: list[Attempt] = []
        ran: list[Execution] = []
        with self._chunk_lock:
            for index, started in enumerate(self._chunk_job_started):
                if started is None or now - started <= CHUNK_YIELD_S:
                    continue
                moved.extend(self._chunk_rest[index])
                self._chunk_rest[index].clear()
                ran.extend(self._chunk_ran[index])
                self._chunk_ran[index] = []
        for attempt in moved:
            self._slots.put([attempt])
        self._hand_to_settler(ran)

    def _hand_to_settler(self, executions: list[Execution]) -> None:
        if executions:
            self._mark_ran(executions)
            self._settles.put(executions)

    def _run_in_slot(
        self,
        attempt: Attempt,
        loop: asyncio.AbstractEventLoop | None,
        db: RoleConnection,
    ) -> Execution | None:
        if self.outage.down and not self._wait_for_database(attempt):
            return None if attempt.settled else _not_started(attempt)
        if not attempt.claimed.retaken:
            return self._run_body(attempt, loop, db)
        # A re-taken job may be the one that killed its last worker: it runs
        # while no other re-taken job runs in this process, so a poison job
        # and the jobs that ran beside it when it struck are never run side
        # by side again (each would be charged for the poison's next crash).
        if not self._suspects.enter(attempt):
            return None  # handed back by the drain while it waited
        try:
            return self._run_body(attempt, loop, db)
        finally:
            self._suspects.leave(attempt)

    def _run_body(
        self,
        attempt: Attempt,
        loop: asyncio.AbstractEventLoop | None,
        db: RoleConnection,
    ) -> Execution | None:
        if not self._mark_started(attempt, db):
            return _not_started(attempt)
        attempt.start()
        try:
            self._send_started(attempt)
            execution = run_attempt(attempt, self.driver, loop=loop)
        except BaseException as error:
            # Never lose the slot, nor the row, to a bug (or to a SystemExit
            # from a signal receiver): the attempt is settled as failed.
            logger.exception("jobs.worker.slot-failed")
            execution = (
                settle_for(attempt, error=error) if attempt.take_settlement() else None
            )
        if execution is None and attempt.abandoned:
            with self._lock:
                self._stuck -= 1
        if execution is not None and execution.error is not None:
            if is_database_away(execution.error):
                # The body met the database away (a restart, a read-only
                # failover): its sessions are replaced (a read-only one would
                # stay read-only), and the process learns of the outage, so
                # the next bodies wait for it rather than fail the same way.
                close_thread_connections()
                self.outage.lost(
                    "slot",
                    execution.error,
                    last_ok=None,
                    using=self._claim_db.using,
                )
                if is_connection_gone(execution.error):
                    execution = _handed_back(execution)
        if execution is None or execution.error is not None:
            # Only a failed body can have broken its connection; a
            # scan of every connection per job cost ~8% of a no-op.
            reset_broken_connections()
        return execution

    def _wait_for_database(self, attempt: Attempt) -> bool:
        # Bodies do not start while the database is known to be away: one
        # that needs it would fail and spend an attempt. False: the attempt
        # was handed back or lost its lease meanwhile.
        while self.outage.down:
            if attempt.settled or attempt.token.is_set():
                return False
            self.outage.wait_up(0.2)
        return True

    def _mark_started(self, attempt: Attempt, db: RoleConnection | None = None) -> bool:
        # A re-taken lapsed lease records its start before the body runs, so
        # that a lapse of this claim charges its attempt (see job_claim).
        # False: the claim is no longer ours, or the mark could not be
        # written; the body must not run.
        if not attempt.claimed.needs_start_mark:
            return True
        claimed = attempt.claimed
        try:
            landed = self.driver.mark_started(claimed.id, claimed.identity)
        except Exception as error:
            if not recover(db, error):
                logger.exception("jobs.worker.mark-started-failed")
            return False
        if db is not None:
            db.ok()
        return landed

    def _settler_main(self) -> None:
        db = self._settle_db
        db.bind()
        pending: list[Execution] = []
        stop = False
        try:
            while True:
                batch, stop = self._next_settle_batch(pending, stop)
                retry_in = db.retry_in()
                if retry_in > 0:
                    # The database is away: keep the batch (and gather more)
                    # until this process's next try.
                    pending = batch
                    if not stop:
                        self._wait_for_settles(pending, retry_in)
                        continue
                    if self._may_keep_trying():
                        time.sleep(min(retry_in, 0.1))
                        continue
                pending = (
                    self._write_settles(batch) if batch and retry_in == 0 else pending
                )
                if stop and (not pending or not self._may_keep_trying()):
                    self._settler.give_up(pending)
                    return
        finally:
            connections.close_all()

    def _next_settle_batch(
        self, pending: list[Execution], stop: bool
    ) -> tuple[list[Execution], bool]:
        # Settles kept from a failed write come first. Gather what finishes
        # within a couple of milliseconds into one statement: settles add
        # latency to nothing a user waits on, and one round trip per batch
        # is the throughput.
        batch = list(pending)
        if not batch and not stop:
            first = self._settles.get()
            if first is _STOP:
                return [], True
            batch.extend(first)
        gather_until = time.monotonic() + _SETTLE_GATHER_S
        while not stop and len(batch) < _SETTLE_BATCH:
            try:
                timeout = gather_until - time.monotonic()
                if timeout <= 0 or len(batch) >= self.held_count():
                    item = self._settles.get_nowait()
                else:
                    item = self._settles.get(timeout=timeout)
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            batch.extend(item)
        return batch, stop

    def _wait_for_settles(self, pending: list[Execution], seconds: float) -> None:
        # While the database is away, new settles still arrive; hold them
        # with the pending ones, and put a stop back for the next round.
        try:
            item = self._settles.get(timeout=seconds)
        except queue.Empty:
            return
        if item is _STOP:
            self._settles.put(_STOP)  # read again by the next gather
        else:
            pending.extend(item)

    def _write_settles(self, batch: list[Execution]) -> list[Execution]:
        """Write ``batch``; answer what must be written again (the database was away)."""
        fault_point(BEFORE_OUTCOME_WRITE)
        self._settle_db.refresh()
        try:
            self._settler.settle(batch)
        except Exception as error:
            unwritten = [e for e in batch if e.landed is None]
            if self._settle_db.failed(error):
                # Kept and written again once the database answers: the
                # claims are still ours until their leases lapse, and a
                # settle that then no longer lands is only logged.
                return unwritten
            state = sqlstate(error)
            if state in _TRANSIENT_SQLSTATES and self._settle_retries < SETTLE_RETRIES:
                # A deadlock or serialization victim: the server rolled the
                # statement back whole, and the same write lands on a retry.
                # Given up instead, bodies that ran would wait out their
                # leases and run again (and a lapse may spend an attempt).
                self._settle_retries += 1
                logger.warning(
                    "jobs.settle.retried",
                    extra={"sqlstate": state, "count": len(unwritten)},
                )
                return unwritten
            self._settle_retries = 0
            logger.exception("jobs.worker.settle-failed", extra={"count": len(batch)})
            self._settler.give_up(unwritten)
            return []
        self._settle_retries = 0
        self._settle_db.ok()
        return []

    def _may_keep_trying(self) -> bool:
        # After the stop, pending settles are retried until the drain
        # deadline; then they are left to their leases.
        return self._deadline_at is not None and time.monotonic() < self._deadline_at

    def _mark_ran(self, executions: list[Execution]) -> None:
        # Before the settles are queued, so a settle cannot come first and
        # leave a stale id behind.
        with self._lock:
            for execution in executions:
                if execution.claimed.id in self._held:
                    self._ran.add(execution.claimed.id)
            # The bodies ran: their limits are free for the next claim.
            released = self._release_limits([e.claimed.id for e in executions])
            free = self._free_locked()
        self._wake_claims(free, released)

    def _wake_claims(self, free: int, released: bool) -> None:
        # Wake the claim loop only once a claim is worth it again (a wake
        # per settled job was most of what the loop did between claims), or
        # at once when an in-process limit was released: the claim that
        # found the tenant (queue, global) full came back empty and backed
        # off towards the idle maximum, and nothing else would wake it (a
        # flooding tenant ran 4 at a time with 1-2 s gaps, ~3 jobs/s).
        if released:
            self._uncapped_after = 0.0
            self.backoff.reset()
        if (released or free >= self._worth_claiming()) and not self._wake.is_set():
            self._wake.set()

    def _settled(self, execution: Execution) -> None:
        with self._lock:
            self._held.pop(execution.claimed.id, None)
            self._ran.discard(execution.claimed.id)
            released = self._release_limits([execution.claimed.id])
            # A running mean of attempt durations decides how far to claim ahead.
            self._mean_ms += (execution.duration_ms - self._mean_ms) * 0.05
            self.counts[execution.outcome] = self.counts.get(execution.outcome, 0) + 1
            if execution.outcome != "suspended" or execution.handle is not None:
                self.processed += 1
            reached = (
                self.config.max_jobs is not None
                and self.processed >= self.config.max_jobs
            )
            # Under the same lock (once per settled job: a second acquire
            # here was a measurable share of the settler thread).
            free = self._free_locked()
        if reached and self.state == "running":
            self.request_stop(reason="max-jobs")
        self._wake_claims(free, released)

    # -- leases, deadlines, registry, drain -------------------------------------

    def _keeper_main(self) -> None:
        next_beat = time.monotonic()
        self._keep_db.bind()
        try:
            while not self._keeper_stop.is_set():
                now = time.monotonic()
                if now >= next_beat:
                    self._renew_leases()
                    # After a failed renewal, the next try comes on the
                    # process's reconnect schedule, not a heartbeat later:
                    # leases must be renewed before they lapse.
                    next_beat = now + (
                        0.05
                        if self._keep_db.failing
                        else self.config.heartbeat_ms / 1000
                    )
                    self._maybe_roll_up(now)
                self._fire_deadlines(now)
                self._rebalance_chunks(now)
                self._drain_step(now)
                self._keeper_stop.wait(min(0.05, max(0.0, next_beat - now)))
        finally:
            connections.close_all()

    def _renew_leases(self) -> None:
        with self._lock:
            held = [a for a in self._held.values() if not a.settled]
        visibility_s = self.config.visibility_ms / 1000
        if self._keep_db.failing:
            # A try is taken only to be used: one taken and not used would
            # starve the roles that have work for the database (the settler).
            if not held:
                self._keep_db.stand_down()
            elif self._keep_db.retry_in() > 0:
                return
        if held:
            self._keep_db.refresh()
            try:
                landed = self.driver.heartbeat_many(
                    [(a.claimed.id, a.claimed.identity) for a in held],
                    visibility_ms=self.config.visibility_ms,
                )
            except Exception as error:
                if not self._keep_db.failed(error):
                    logger.warning("jobs.heartbeat.failed", exc_info=True)
                landed = None
            else:
                self._keep_db.ok()
            now = time.monotonic()
            for attempt in held:
                if landed is not None and attempt.claimed.id in landed:
                    attempt.renewed = now
                    if attempt.claimed.id in landed.slots_lost:
                        self._lose_slot(attempt)
                elif landed is not None or now - attempt.renewed >= visibility_s:
                    self._lose(attempt)
        if not self._keep_db.failing:
            self._announce(bool(held))

    def _maybe_roll_up(self, now: float) -> None:
        # Fold counter tiers every 10 minutes, but only after settling work:
        # an idle worker must not spend its statement budget on it.
        if (
            now - self._rolled_up_at < COUNTER_ROLLUP_INTERVAL_S
            or self._keep_db.failing
        ):
            return
        if self.processed == self._processed_at_rollup:
            return
        self._rolled_up_at, self._processed_at_rollup = now, self.processed
        roll_up = self.driver.maintenance.rollup_counters
        try:
            roll_up()
        except Exception as error:
            if not self._keep_db.failed(error):
                logger.warning("jobs.worker.rollup-failed", exc_info=True)

    def _lose(self, attempt: Attempt) -> None:
        if attempt.settled:
            return
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
        if attempt.settled:
            return
        logger.error("jobs.worker.slot-lost", extra=_job_extra(attempt))
        name = attempt.claimed.name
        attempt.token.cancel(
            JobSlotLost(f"the fleet-wide slot of {name} lapsed or was taken")
        )

    def _announce(self, busy: bool) -> None:
        if not busy and self._announced:
            # Idle: the next claim refreshes the registry row in passing.
            self._registry_due = True
            return
        with self._lock:
            in_flight = [str(job_id) for job_id in list(self._held)[:100]]
        announce = getattr(self.driver, "announce_worker", None)
        if announce is None:
            return
        try:
            announce(self._record(in_flight), ttl_ms=self.config.visibility_ms)
            self._announced = True
        except Exception as error:
            if not self._keep_db.failed(error):
                logger.warning("jobs.worker.announce-failed", exc_info=True)

    def _record(self, in_flight: list[str]) -> WorkerRecord:
        from django.utils import timezone

        now = timezone.now()
        return WorkerRecord(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(self.config.queues),
            concurrency=self.config.concurrency,
            in_flight=in_flight,
            started_at=now,
            heartbeat_at=now,
            expires_at=now,
        )

    def _fire_deadlines(self, now: float) -> None:
        with self._lock:
            due = [
                a
                for a in self._held.values()
                if a.deadline is not None and a.deadline <= now and not a.settled
            ]
        for attempt in due:
            timeout_ms = attempt.timeout_ms
            reason = JobTimeout(
                f"{attempt.claimed.name} passed its timeout of {timeout_ms} ms"
            )
            # Cancel first, then settle: the settle makes the job claimable
            # elsewhere, and a body still running must already be told to stop.
            attempt.token.cancel(reason)
            if attempt.take_settlement():
                attempt.abandoned = True
                with self._lock:
                    self._stuck += 1
                    stuck = self._stuck
                self._settles.put([settle_for(attempt, error=reason)])
                if stuck > self.config.stuck_slots_max and self.state == "running":
                    logger.error(
                        "jobs.worker.too-many-stuck-slots", extra={"stuck": stuck}
                    )
                    self.request_stop(reason="stuck-slots")

    def _drain_step(self, now: float) -> None:
        if self._cutoff_at is None:
            return
        if now >= self._cutoff_at and not self.drain_token.is_set():
            logger.info("jobs.worker.drain-cancelling", extra={"worker_id": self.id})
            reason = Draining(f"worker {self.id} is shutting down")
            self.drain_token.cancel(reason)
            with self._lock:
                held = list(self._held.values())
            for attempt in held:
                attempt.token.cancel(reason)
        if self._handback_at is not None and now >= self._handback_at:
            self._handback_at = None
            self._hand_back_all()

    def _hand_back_all(self) -> None:
        with self._lock:
            held = list(self._held.values())
        self._hand_back(held)

    def _hand_back_unstarted(self) -> None:
        # The drain's first step: rows held ahead that no slot has started
        # go back now, ready at once and uncounted, rather than start after
        # the stop or wait for the hand-back at deadline - margin/2. A
        # capped one holds its key's fleet-wide slot meanwhile, and any one
        # could run on another worker (found by the limits review).
        waiting: list[Attempt] = []
        while True:
            try:
                item = self._slots.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._slots.put(_STOP)
                break
            waiting.extend(item)
        with self._chunk_lock:
            for rest in self._chunk_rest:
                waiting.extend(rest)
                rest.clear()
        self._hand_back(waiting)

    def _hand_back(self, attempts: list[Attempt]) -> None:
        # Each attempt not settled yet goes back uncounted (X_DRAINING).
        handed = 0
        for attempt in attempts:
            if attempt.take_settlement():
                handed += 1
                self._settles.put([self._drained(attempt)])
        if handed:
            logger.info("jobs.worker.drain-handed-back", extra={"count": handed})

    def _drained(self, attempt: Attempt) -> Execution:
        reason = Draining(f"worker {self.id} is shutting down")
        return Execution(
            attempt.claimed,
            "interrupted",
            attempt.elapsed_ms(),
            attempt.handle,
            nack=NackRequest(
                job_id=attempt.claimed.id,
                identity=attempt.claimed.identity,
                error=reason.render(),
                counts_as_attempt=False,
            ),
            error=reason,
        )

    def _finish(self) -> None:
        """Wait for held work under the drain budget, then stop every thread."""
        if self.state == "running":
            self.request_stop(reason=self.exit_reason or "stopped")
        self._hand_back_unstarted()
        deadline = self._deadline_at or time.monotonic()
        while self.held_count() > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.held_count() > 0:
            logger.error(
                "jobs.worker.drain-abandoned",
                extra={"held": self.held_count(), "fix": "raise SHUTDOWN_DEADLINE"},
            )
        for _ in range(self.config.concurrency):
            self._slots.put(_STOP)
        self._settles.put(_STOP)
        self._keeper_stop.set()
        for thread in self._threads:
            # Slot threads stuck in an abandoned body are daemons: a short
            # join, within what is left of the drain deadline, then the
            # process may exit without them.
            if thread.name in ("uj-settler", "uj-keeper"):
                thread.join(timeout=5)
            else:
                thread.join(timeout=min(0.5, max(0.05, deadline - time.monotonic())))
        forget = getattr(self.driver, "forget_worker", None)
        if forget is not None:
            try:
                forget(self.id)
            except Exception:
                reset_broken_connections()
                logger.warning("jobs.worker.forget-failed", exc_info=True)
        self.state = "stopped"
        logger.info(
            "jobs.worker.stopped", extra={"worker_id": self.id, "counts": self.counts}
        )

    def _deadline_timer(self, attempt: Attempt) -> threading.Timer | None:
        if attempt.deadline is None:
            return None
        timeout_ms = attempt.timeout_ms
        timer = threading.Timer(
            max(0.0, attempt.deadline - time.monotonic()),
            attempt.token.cancel,
            args=(
                JobTimeout(
                    f"{attempt.claimed.name} passed its timeout of {timeout_ms} ms"
                ),
            ),
        )
        timer.daemon = True
        timer.start()
        return timer


class _OneAtATime:
    """Lets one re-taken attempt run at a time (or after one that was abandoned)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: Attempt | None = None

    def enter(self, attempt: Attempt) -> bool:
        """Wait for the turn of ``attempt``; False if it was settled meanwhile."""
        with self._changed:
            # A body abandoned past its deadline has been settled: it no
            # longer holds the turn, or one hung job would block them all.
            while self._running is not None and not self._running.settled:
                if attempt.settled:
                    return False
                self._changed.wait(0.1)
            if attempt.settled:
                return False
            self._running = attempt
            return True

    def leave(self, attempt: Attempt) -> None:
        """``attempt`` ended: the next one may run."""
        with self._changed:
            if self._running is attempt:
                self._running = None
            self._changed.notify_all()


def _handed_back(execution: Execution) -> Execution:
    # A body whose connection dropped under it (a restart, a failover): not
    # its fault, so the attempt is given back and the job runs again soon.
    claimed, error = execution.claimed, execution.error
    render = getattr(error, "render", None)
    text = render() if callable(render) else f"{type(error).__name__}: {error}"
    nack = NackRequest(
        job_id=claimed.id,
        identity=claimed.identity,
        delay_ms=DATABASE_AWAY_RETRY_MS,
        error=f"X_DRIVER_UNAVAILABLE: the database connection dropped under the body "
        f"({text[:300]}); the attempt was not counted",
        counts_as_attempt=False,
        duration_ms=execution.duration_ms,
    )
    return Execution(
        claimed,
        "interrupted",
        execution.duration_ms,
        execution.handle,
        nack=nack,
        error=error,
    )


def _not_started(attempt: Attempt) -> Execution:
    # Nothing is written: the row stays leased to this claim until its lease
    # lapses, and that lapse is not charged (its start was never recorded).
    attempt.take_settlement()
    return Execution(attempt.claimed, "lost", 0, attempt.handle)


def _job_extra(attempt: Attempt) -> dict[str, str]:
    return {"job": attempt.claimed.name, "job_id": str(attempt.claimed.id)}


def _log_receiver_errors(signal_name: str, answers: list[tuple[Any, Any]]) -> None:
    for receiver, answer in answers:
        if isinstance(answer, Exception):
            logger.error(
                "jobs.signal.receiver-failed",
                extra={"signal": signal_name, "receiver": repr(receiver)},
                exc_info=answer,
            )
