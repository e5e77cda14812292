"""The slot pool: ``concurrency`` threads that run claimed attempts' bodies.

The claim loop hands claimed attempts to :meth:`SlotPool.dispatch`, which
puts them on the slot queue, very short jobs in chunks (one thread wake per
chunk). Each slot thread takes a chunk, runs its bodies one after another
through :func:`~.executor.run_attempt`, marks them ran in the held attempts
and hands the chunk's executions to the settle queue in one put. A chunk
whose job turns out long is split by the keeper (:meth:`SlotPool.rebalance`).
Re-taken attempts (suspects of a crash) run one at a time; nothing starts
while the database is known to be away; a body whose connection dropped
under it is handed back uncounted.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django.db import connections

from ..drivers.base import JobDriver, NackRequest
from ..drivers.outage import DatabaseOutage
from ..drivers.sessions import Session
from ..errors import JobTimeout
from ..signals import job_started
from .config import WorkerConfig
from .executor import Attempt, Execution, run_attempt, settle_for
from .held import HeldAttempts
from .lifecycle import Lifecycle
from .refusals import drained, not_started, park_unknown, refuse_busy
from .watchers import AttemptWatchers

__all__ = [
    "CHUNK_BELOW_MS",
    "CHUNK_MIN",
    "CHUNK_YIELD_S",
    "DATABASE_AWAY_RETRY_MS",
    "OneAtATime",
    "SlotPool",
]

logger = logging.getLogger("django_ultimate_jobs")

_STOP: Any = object()
DATABASE_AWAY_RETRY_MS = 1_000
"""When a job whose connection dropped under its body runs again."""
CHUNK_BELOW_MS = 1.0
"""Below this mean attempt duration claimed jobs reach the slots in chunks."""
CHUNK_MIN = 16
"""The smallest chunk: fewer slots woken, as no-op bodies gain nothing from threads."""
CHUNK_YIELD_S = 0.005
"""A job in a chunk that runs longer has the rest of its chunk moved to other slots."""


class SlotPool:
    """The slot threads of one worker, and the chunks they run."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        driver: JobDriver,
        held: HeldAttempts,
        life: Lifecycle,
        submit: Callable[[list[Execution]], None],
        open_session: Callable[[str], Session],
        outage: DatabaseOutage,
        worker_id: str,
        watchers: AttemptWatchers | None = None,
    ) -> None:
        self._config = config
        self._watchers = watchers or AttemptWatchers()
        self.driver = driver
        self._held = held
        self._life = life
        self._submit = submit
        """Put executions on the settle queue (its ``put``: no call in between)."""
        self._open_session = open_session
        self._outage = outage
        self._worker_id = worker_id
        self._slots: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Per slot: the rest of its chunk, what of it already ran (settled
        # together at the chunk's end), and when its current job started.
        # The keeper moves both on once a job runs long (rebalance).
        self._chunk_lock = threading.Lock()
        self._chunk_rest: list[deque[Attempt]] = [
            deque() for _ in range(config.concurrency)
        ]
        self._chunk_ran: list[list[Execution]] = [[] for _ in range(config.concurrency)]
        self._chunk_job_started: list[float | None] = [None] * config.concurrency
        self._suspects = OneAtATime()
        self._threads: list[threading.Thread] = []

    # -- the threads -------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether the slot threads run (the threaded loop, not tick())."""
        return bool(self._threads)

    def start(self) -> None:
        """Start the slot threads (``uj-slot-<n>``)."""
        for index in range(self._config.concurrency):
            thread = threading.Thread(
                target=partial(self._main, index), name=f"uj-slot-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Ask every slot thread to end once it has taken what is queued before."""
        for _ in range(self._config.concurrency):
            self._slots.put(_STOP)

    def join(self, deadline: float) -> None:
        """Wait for the slot threads, within what is left of the drain deadline."""
        for thread in self._threads:
            # Slot threads stuck in an abandoned body are daemons: a short
            # join, within what is left of the drain deadline, then the
            # process may exit without them.
            thread.join(timeout=min(0.5, max(0.05, deadline - time.monotonic())))

    # -- handing attempts to the slots -------------------------------------------

    def chunk_size(self, count: int) -> int:
        """How many of ``count`` claimed attempts one slot takes at a time."""
        # Very short jobs reach the slots in chunks of at least CHUNK_MIN:
        # waking a slot thread costs more than running a no-op job, and a
        # wake per job was the claim loop's largest cost. The keeper moves
        # a chunk's rest to other slots once one of its jobs proves long.
        if self._held.mean_ms < CHUNK_BELOW_MS:
            return max(CHUNK_MIN, -(-count // self._config.concurrency))
        return 1

    def dispatch(self, claimed: list[Attempt]) -> None:
        """Queue claimed attempts for the slots (unknown and refused ones settle)."""
        heads: list[Attempt] = []
        rest: list[Attempt] = []
        for attempt in claimed:
            if attempt.handle is None:
                self._submit([park_unknown(attempt, self._config.unknown_park_ms)])
            elif attempt.claimed.key_busy:
                self._submit([refuse_busy(attempt)])
            elif attempt.claimed.start_recorded:
                heads.append(attempt)
            else:
                rest.append(attempt)
        # The rows the claim recorded as started go first, each at the head
        # of its own chunk, so idle slots start them at once.
        size = self.chunk_size(len(heads) + len(rest))
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

    def rebalance(self, now: float) -> None:
        """Move the rest of a chunk whose job runs long to the other slots."""
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

    def take_unstarted(self) -> list[Attempt]:
        """Take back every attempt queued or chunked that no slot has started."""
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
        return waiting

    # -- one slot ------------------------------------------------------------------

    def _main(self, index: int) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        rest = self._chunk_rest[index]
        life = self._life
        drop_dead = self.driver.sessions.drop_dead
        db = self._open_session("slot")
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
                drop_dead()
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
                    if life.state != "running" and attempt.take_settlement():
                        # Draining: what has not started is not started now.
                        self._submit([drained(attempt, self._worker_id)])
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

    def _hand_to_settler(self, executions: list[Execution]) -> None:
        if executions:
            self._held.mark_ran(executions)
            self._submit(executions)

    def _run_in_slot(
        self,
        attempt: Attempt,
        loop: asyncio.AbstractEventLoop | None,
        db: Session,
    ) -> Execution | None:
        if self._outage.down and not self._wait_for_database(attempt):
            return None if attempt.settled else not_started(attempt)
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
        db: Session,
    ) -> Execution | None:
        if not self._mark_started(attempt, db):
            return not_started(attempt)
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
            self._held.unstick()
        if execution is not None and execution.error is not None:
            sessions = self.driver.sessions
            if sessions.is_away(execution.error):
                # The body met the database away (a restart, a read-only
                # failover): its sessions are replaced (a read-only one would
                # stay read-only), and the process learns of the outage, so
                # the next bodies wait for it rather than fail the same way.
                # Only when the job rows live in a Django database: then the
                # storage sessions' next answer ends the outage; a store of
                # its own would never say the body's database came back.
                sessions.close_thread()
                alias = self.driver.alias
                if alias is not None:
                    self._outage.lost(
                        "slot", execution.error, last_ok=None, using=alias
                    )
                if sessions.is_gone(execution.error):
                    execution = _handed_back(execution)
        if execution is None or execution.error is not None:
            # Only a failed body can have broken its connection; a
            # scan of every connection per job cost ~8% of a no-op.
            self.driver.sessions.reset_broken()
        return execution

    def _wait_for_database(self, attempt: Attempt) -> bool:
        # Bodies do not start while the database is known to be away: one
        # that needs it would fail and spend an attempt. False: the attempt
        # was handed back or lost its lease meanwhile.
        while self._outage.down:
            if attempt.settled or attempt.token.is_set():
                return False
            self._outage.wait_up(0.2)
        return True

    def _mark_started(self, attempt: Attempt, db: Session | None = None) -> bool:
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
            if not self.driver.sessions.recover(db, error):
                logger.exception("jobs.worker.mark-started-failed")
            return False
        if db is not None:
            db.ok()
        return landed

    def _send_started(self, attempt: Attempt) -> None:
        if attempt.handle is None:
            return
        if self._watchers.on_started:
            self._watchers.started(attempt.claimed)
        if job_started.listened_for(type(attempt.handle)):
            # send_robust: a broken receiver must not cost the job its slot.
            answers = job_started.send_robust(
                sender=type(attempt.handle), job=attempt.handle, claimed=attempt.claimed
            )
            _log_receiver_errors("job_started", answers)

    # -- inline (tick) -------------------------------------------------------------

    def run_inline(self, claimed: Sequence[Attempt]) -> list[Execution]:
        """Run ``claimed`` one after another in this thread; answer how each ended.

        The same start mark, signal and executor as a slot thread's; a
        deadline cancels the token from a timer.
        """
        executions: list[Execution] = []
        for attempt in claimed:
            if attempt.handle is None:
                executions.append(park_unknown(attempt, self._config.unknown_park_ms))
                continue
            if attempt.claimed.key_busy:
                executions.append(refuse_busy(attempt))
                continue
            if not self._mark_started(attempt):
                executions.append(not_started(attempt))
                continue
            attempt.start()
            timer = _deadline_timer(attempt)
            try:
                self._send_started(attempt)
                execution = run_attempt(attempt, self.driver)
            finally:
                if timer is not None:
                    timer.cancel()
            if execution is not None:
                executions.append(execution)
        return executions


class OneAtATime:
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


def _deadline_timer(attempt: Attempt) -> threading.Timer | None:
    if attempt.deadline is None:
        return None
    timeout_ms = attempt.timeout_ms
    timer = threading.Timer(
        max(0.0, attempt.deadline - time.monotonic()),
        attempt.token.cancel,
        args=(
            JobTimeout(f"{attempt.claimed.name} passed its timeout of {timeout_ms} ms"),
        ),
    )
    timer.daemon = True
    timer.start()
    return timer


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


def _log_receiver_errors(signal_name: str, answers: list[tuple[Any, Any]]) -> None:
    for receiver, answer in answers:
        if isinstance(answer, Exception):
            logger.error(
                "jobs.signal.receiver-failed",
                extra={"signal": signal_name, "receiver": repr(receiver)},
                exc_info=answer,
            )
