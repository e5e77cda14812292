"""The attempts this process holds: the one object the worker's parts share.

Every part reads or changes it instead of reaching into another part: the
claim loop adds what it claimed (:meth:`HeldAttempts.take`) and asks how
much room is left (:meth:`HeldAttempts.claim_room`); the slots mark what
ran (:meth:`HeldAttempts.mark_ran`); the settle loop removes what settled
(:meth:`HeldAttempts.settled`); the keeper renews, times out and hands back
what it lists. It keeps, under ONE lock (today's only lock on the per-job
path):

- the held map (claimed, not settled), the ran set (bodies that ran, settle
  queued or in flight), the stuck count (bodies abandoned past their
  deadline, still occupying a slot thread), the claimed total (for
  ``max_jobs``), the settled counts, and the running mean of attempt
  durations that decides how far to claim ahead;
- the in-process limits' leases (worker/limits.py): taken at the claim,
  released once the body has run;
- the capped keys' tenure (runs in a row a key's slot went to by hand-over).

A change that frees room wakes the claim loop through the shared
:class:`~.wakeflag.ClaimWake`, and only once a claim is worth it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from uuid import UUID

from ..drivers.base import ClaimedJob
from ..registry import get_job
from .config import WorkerConfig
from .executor import Attempt, Execution
from .lifecycle import Lifecycle
from .limits import Lease, Limiter
from .wakeflag import ClaimWake

__all__ = ["HANDOVER_TENURE", "SETTLE_BATCH", "SHORT_JOB_MS", "HeldAttempts"]

SETTLE_BATCH = 256
"""The most settlements one statement writes; also what may wait for one."""
SHORT_JOB_MS = 50
"""Below this mean attempt duration a worker claims a whole batch ahead."""
HANDOVER_TENURE = 6
"""Runs in a row a capped key's slot goes to by hand-over before it is let go."""


class HeldAttempts:
    """The attempts claimed and not yet settled, and the room they leave."""

    def __init__(
        self, config: WorkerConfig, *, life: Lifecycle, wake: ClaimWake
    ) -> None:
        self._config = config
        self._life = life
        self._wake = wake
        self._lock = threading.Lock()
        self._held: dict[UUID, Attempt] = {}
        # Held attempts whose bodies have run and whose settle is queued or
        # in flight: they no longer occupy a slot, so the next claim may
        # overlap their settle (claim and ack then run on two connections at
        # once instead of taking turns).
        self._ran: set[UUID] = set()
        self._stuck = 0
        self._claimed_total = 0  # attempts of known jobs, for max_jobs
        self.mean_ms = float(SHORT_JOB_MS)  # cautious until jobs are measured
        """The running mean of attempt durations (written under the lock)."""
        self.processed = 0
        self.counts: dict[str, int] = {}
        # In-process limits (worker/limits.py); None when none is set, so a
        # worker without limits claims exactly as before.
        self.limiter = Limiter(config.limits) if config.limits.active else None
        self._leases: dict[UUID, Lease] = {}
        self._tenure: dict[str, int] = {}
        """Per concurrency key: the runs its slot went to by hand-over in a row."""
        self._tenure_settling: dict[str, int] = {}
        """The counts of the keys the settle being written may hand over."""

    # -- what is held ----------------------------------------------------------

    def count(self) -> int:
        """Attempts claimed and not yet settled."""
        with self._lock:
            return len(self._held)

    def snapshot(self) -> list[Attempt]:
        """Every attempt held now."""
        with self._lock:
            return list(self._held.values())

    def unsettled(self) -> list[Attempt]:
        """The attempts held whose settle nobody has taken yet."""
        with self._lock:
            return [a for a in self._held.values() if not a.settled]

    def past_deadline(self, now: float) -> list[Attempt]:
        """The attempts held, not settled, whose deadline is at or before ``now``."""
        with self._lock:
            return [
                a
                for a in self._held.values()
                if a.deadline is not None and a.deadline <= now and not a.settled
            ]

    def ids(self, limit: int) -> list[str]:
        """The ids of up to ``limit`` attempts held (the registry's in-flight list)."""
        with self._lock:
            return [str(job_id) for job_id in list(self._held)[:limit]]

    # -- room ------------------------------------------------------------------

    def claim_room(self) -> tuple[int, int, int, int]:
        """The free capacity, the attempts held, the idle slots, the re-take allowance."""
        # What the claim loop reads before each claim, under one acquire of
        # the lock (four helpers taking it in turn were a fifth of the Python
        # between an idle worker's wake and its claim): the free capacity
        # (_free_locked), the attempts held, the idle slots (idle_slots) and
        # the re-take allowance (retake).
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
                max(0, self._config.concurrency - busy),
                retake,
            )

    def _free_locked(self) -> int:
        # Slots plus claim-ahead, minus attempts not yet run; settles in
        # flight are bounded by one settle batch more. Call with the lock held.
        held = len(self._held)
        capacity = self.capacity()
        free = min(
            capacity - (held - len(self._ran)) - self._stuck,
            capacity + SETTLE_BATCH - held,
        )
        if self._config.max_jobs is not None:
            # A recycling worker claims no more than it may run.
            free = min(free, self._config.max_jobs - self._claimed_total)
        return free

    def capacity(self) -> int:
        """How many attempts not yet run may be held (slots and claim-ahead)."""
        # Jobs held beyond the running slots, so slots never wait on a claim
        # round trip: a whole claim batch while jobs are short (their leases
        # are settled within milliseconds). None once they are not: a claim
        # round trip is small beside such a job, long jobs are not hoarded
        # away from other workers, and a row `running` in the database is a
        # body running (an operator reading the table during an incident is
        # not misled by jobs that only wait in a worker).
        short = self.mean_ms < SHORT_JOB_MS
        ahead = self._config.claim_batch if short else 0
        return self._config.concurrency + ahead

    def worth_claiming(self) -> int:
        """The free room below which a claim waits for more."""
        # A claim waits until three quarters of what may be held ahead is
        # free, rather than paying a round trip for a few rows: claims
        # overlap settles now, so a claim of half a batch came too early.
        return max(1, (self.capacity() - self._config.concurrency) * 3 // 4)

    def capped_busy(self) -> int:
        """Attempts held, their settles written or not, plus stuck slots."""
        with self._lock:
            return len(self._held) + self._stuck

    def held_ahead(self) -> int:
        """Attempts not yet run beyond the slots."""
        with self._lock:
            busy = len(self._held) - len(self._ran) + self._stuck
        return max(0, busy - self._config.concurrency)

    def idle_slots(self) -> int:
        """Slots that no attempt held occupies."""
        with self._lock:
            busy = len(self._held) - len(self._ran) + self._stuck
        return max(0, self._config.concurrency - busy)

    def retake(self) -> int:
        """1 if a re-taken lapsed lease may be claimed now, else 0."""
        # One suspect (a re-taken lapsed lease) held at a time: suspects run
        # one at a time anyway (slots.OneAtATime), and one held waiting for
        # its turn would lapse again if the running one killed the process.
        with self._lock:
            held = list(self._held.values())
        return 0 if any(a.claimed.retaken and not a.settled for a in held) else 1

    # -- claimed -----------------------------------------------------------------

    def take(
        self,
        rows: Sequence[ClaimedJob],
        shed: list[tuple[ClaimedJob, str | None]],
    ) -> list[Attempt]:
        """Hold the rows a claim took; answer their attempts.

        With in-process limits, a row whose limits cannot be taken is not
        held: it is appended to ``shed`` with the limit that refused it.
        """
        attempts = []
        limiter = self.limiter
        with self._lock:
            for claimed in rows:
                if limiter is not None and not self._admit(limiter, claimed):
                    shed.append((claimed, limiter.last_refusal))
                    continue
                if claimed.concurrency_key is not None:
                    self._tenure.pop(claimed.concurrency_key, None)
                attempt = Attempt(claimed, get_job(claimed.name))
                self._held[claimed.id] = attempt
                attempts.append(attempt)
                if attempt.handle is not None:
                    self._claimed_total += 1
        return attempts

    def _admit(self, limiter: Limiter, claimed: ClaimedJob) -> bool:
        # Call with the lock held: take the row's limits, or refuse it.
        lease = limiter.try_acquire(claimed.queue, claimed.tenant_id)
        if lease is not None:
            self._leases[claimed.id] = lease
        return lease is not None

    def settle_tenure(self, settling: Sequence[ClaimedJob]) -> None:
        """Take the tenure of the keys ``settling`` out, for the hand-over to come.

        The count of a settling key is put back only for a key that gets an
        heir (:meth:`take_heirs`): the map holds the keys this worker runs by
        hand-over now, never every key seen.
        """
        with self._lock:
            self._tenure_settling = {
                key: self._tenure.pop(key)
                for key in {row.concurrency_key for row in settling}
                if key is not None and key in self._tenure
            }

    def tenure_spent(self) -> list[str]:
        """The settling keys whose slot is let go rather than handed over."""
        return [
            key
            for key, runs in self._tenure_settling.items()
            if runs >= HANDOVER_TENURE
        ]

    def take_heirs(self, claimed: Sequence[ClaimedJob]) -> list[Attempt]:
        """Hold the rows a settle claimed with the slots it held."""
        # The same holding as take()'s, written out rather than called per
        # row: this loop is the per-job path of a capped worker's settles.
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
        return attempts

    # -- ran, stuck, settled -------------------------------------------------------

    def mark_ran(self, executions: list[Execution]) -> None:
        """These bodies ran: their slots and limits are free for the next claim."""
        # Before the settles are queued, so a settle cannot come first and
        # leave a stale id behind.
        with self._lock:
            for execution in executions:
                if execution.claimed.id in self._held:
                    self._ran.add(execution.claimed.id)
            # The bodies ran: their limits are free for the next claim.
            released = self._release_limits([e.claimed.id for e in executions])
            free = self._free_locked()
        self._room_freed(free, released)

    def stick(self) -> int:
        """A body was abandoned past its deadline; answer how many are stuck."""
        with self._lock:
            self._stuck += 1
            return self._stuck

    def unstick(self) -> None:
        """An abandoned body returned at last: its slot thread is free again."""
        with self._lock:
            self._stuck -= 1

    def settled(self, execution: Execution) -> None:
        """A settle was written (or given up): the attempt is no longer held."""
        with self._lock:
            self._held.pop(execution.claimed.id, None)
            self._ran.discard(execution.claimed.id)
            released = self._release_limits([execution.claimed.id])
            # A running mean of attempt durations decides how far to claim ahead.
            self.mean_ms += (execution.duration_ms - self.mean_ms) * 0.05
            self.counts[execution.outcome] = self.counts.get(execution.outcome, 0) + 1
            if execution.outcome != "suspended" or execution.handle is not None:
                self.processed += 1
            reached = (
                self._config.max_jobs is not None
                and self.processed >= self._config.max_jobs
            )
            # Under the same lock (once per settled job: a second acquire
            # here was a measurable share of the settler thread).
            free = self._free_locked()
        if reached and self._life.state == "running":
            self._life.request_stop(reason="max-jobs")
        self._room_freed(free, released)

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

    def _room_freed(self, free: int, released: bool) -> None:
        # Wake the claim loop only once a claim is worth it again (a wake
        # per settled job was most of what the loop did between claims), or
        # at once when an in-process limit was released: the claim that
        # found the tenant (queue, global) full came back empty and backed
        # off towards the idle maximum, and nothing else would wake it (a
        # flooding tenant ran 4 at a time with 1-2 s gaps, ~3 jobs/s).
        wake = self._wake
        if released:
            wake.uncapped_after = 0.0
            wake.backoff.reset()
        if (released or free >= self.worth_claiming()) and not wake.flag.is_set():
            wake.flag.set()
