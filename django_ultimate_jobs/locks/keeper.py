"""The lock keeper: one thread per process and driver that talks to the leases.

Every statement of a lock (each acquire try, each renewal, the release)
runs on this thread, on its own connection: never inside the caller's
transaction, where a grant would stay invisible to the other holders until
commit (two holders at once) and a rollback would take it back. The
connection is the driver's ``lock`` session (``driver.sessions``; on
PostgreSQL named ``uj:lock:...``), reset after a loss and retried on the
process-wide outage schedule, so a terminated backend costs a renewal, not
the lock. It reports to the process's outage tracker
(:func:`~..drivers.outage.process_outage`), shared with a worker's roles: one
``jobs.db.lost`` per outage, not one more from the keeper.

Renewals run every ttl / 3. A lock is lost when a renewal is refused (the
lease lapsed or was taken) or when none landed within the ttl, measured on
this process's monotonic clock from the moment the last landed renewal was
sent (decided before each renewal; a late success is still late). Then its
cancellation token is set. The thread exits after a second with nothing to
do, closing its connection, and starts again on the next lock.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections

if TYPE_CHECKING:
    from ..context import CancellationToken
    from ..drivers.base import JobDriver
    from ..drivers.leases import HeldLease
    from ..drivers.sessions import Session

__all__ = [
    "CallTimedOut",
    "DatabaseAway",
    "GateTicket",
    "LockKeeper",
    "Renewal",
    "keeper_for",
]

logger = logging.getLogger("django_ultimate_jobs")

T = TypeVar("T")

RENEWALS_PER_TTL = 3
IDLE_EXIT_S = 1.0
"""The keeper thread exits (and closes its connection) after this long idle."""
RENEWAL_RETRY_S = 0.25
GATE_RECHECK_S = 0.25
"""A thread queued at a key looks again this often whether the gate's owner
lost its lock (read from its renewal deadline when its keeper is stuck)."""
"""A renewal that failed on the database is tried again this soon (paced
by the outage schedule while the database is away)."""


class CallTimedOut(Exception):
    """The keeper did not answer a call in time (it is stuck on the database)."""


class DatabaseAway(Exception):
    """A call failed because the database is away (its cause says how)."""


@dataclass(eq=False, slots=True)
class _Call:
    fn: Callable[[], Any]
    on_abandoned: Callable[[Any], None] | None
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    away: bool = False
    """The error said the database is away (lost, restarting, read-only)."""
    abandoned: bool = False


@dataclass(eq=False, slots=True)
class GateTicket:
    """One thread's turn at a key in this process (see :meth:`LockKeeper.enter_gate`)."""

    key: str
    holder: str
    """The holder id this thread asks the database with."""
    thread: int = field(default_factory=threading.get_ident)
    granted: bool = False
    """The database granted the lock (until then the thread is still asking)."""
    lost: Callable[[], bool] | None = None
    """Whether the granted lock was lost (its cancellation), once granted."""

    def is_lost(self) -> bool:
        """The lock this ticket's thread holds was lost: the gate passes on."""
        return self.lost is not None and self.lost()


@dataclass(eq=False, slots=True)
class _Gate:
    owner: GateTicket | None = None
    waiting: int = 0


@dataclass(eq=False, slots=True)
class Renewal:
    """One held lock the keeper renews."""

    lease: HeldLease
    ttl_s: float
    token: CancellationToken
    deadline: float
    """Monotonic instant by which a renewal must land, else the lock is lost."""
    next_renew: float
    on_lost: Callable[[Renewal, str], None]


class LockKeeper:
    """Runs the lease statements of this process's locks on one thread."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver
        self.store = driver.leases
        self.pid = os.getpid()
        self.holder_prefix = f"{socket.gethostname()}:{self.pid}"
        self._cond = threading.Condition()
        self._calls: deque[_Call] = deque()
        self._renewals: set[Renewal] = set()
        self._gates: dict[str, _Gate] = {}
        self._gate_cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.sessions = driver.sessions
        self.outage = self.sessions.outage()
        """The process's: an outage the worker's roles saw is logged once."""

    # -- callers' side ---------------------------------------------------------

    def call(
        self,
        fn: Callable[[], T],
        *,
        timeout: float,
        on_abandoned: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``fn`` on the keeper thread; answer its result or raise its error.

        Raises:
            CallTimedOut: no answer within ``timeout`` seconds; when the call
                finishes later, ``on_abandoned(result)`` undoes it (a grant
                nobody waits for any more is released).
            DatabaseAway: the database is away (lost, restarting, read-only);
                the connection was reset and a later call may succeed.
        """
        call = _Call(fn, on_abandoned)
        with self._cond:
            self._calls.append(call)
            self._ensure_thread()
            self._cond.notify_all()
        if not call.done.wait(timeout):
            with self._cond:
                if not call.done.is_set():
                    call.abandoned = True
                    raise CallTimedOut(
                        f"the lock keeper did not answer in {timeout:g}s"
                    )
        if call.error is not None:
            if call.away:
                raise DatabaseAway(str(call.error)) from call.error
            raise call.error
        return call.result  # type: ignore[no-any-return]

    def renew(self, renewal: Renewal) -> None:
        """Keep ``renewal``'s lease renewed until :meth:`forget`."""
        with self._cond:
            self._renewals.add(renewal)
            self._ensure_thread()
            self._cond.notify_all()

    def forget(self, renewal: Renewal) -> None:
        """Stop renewing (the block ended)."""
        with self._cond:
            self._renewals.discard(renewal)

    def gate_owner(self, key: str) -> GateTicket | None:
        """The ticket of the thread of this process inside ``key``'s gate."""
        with self._gate_cond:
            gate = self._gates.get(key)
            return None if gate is None else gate.owner

    def enter_gate(self, ticket: GateTicket, timeout: float) -> GateTicket | None:
        """Be this process's one thread asking for ``ticket.key``.

        Threads of one process queue here, not in the database: only the
        gate's owner tries the lease (and owns the gate while it holds the
        lock), so a release in this process hands over without a wasted
        statement, and waiters never poll each other. An owner whose lock
        was lost no longer keeps the gate: the next thread goes to the
        database (where the lost lease may still be live until it lapses).

        Returns:
            ``None`` once in; after ``timeout`` s, the owner that kept it.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._gate_cond:
            gate = self._gates.get(ticket.key)
            if gate is None:
                gate = self._gates[ticket.key] = _Gate()
            gate.waiting += 1
            try:
                while True:
                    owner = gate.owner
                    if owner is None or owner.is_lost():
                        gate.owner = ticket
                        return None
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return owner
                    self._gate_cond.wait(min(left, GATE_RECHECK_S))
            finally:
                gate.waiting -= 1

    def exit_gate(self, ticket: GateTicket) -> None:
        """Let the next thread of this process ask for the key (idempotent).

        A ticket whose gate already passed on (its lock was lost) leaves
        the new owner alone.
        """
        with self._gate_cond:
            gate = self._gates.get(ticket.key)
            if gate is None or gate.owner is not ticket:
                return
            gate.owner = None
            if gate.waiting:
                self._gate_cond.notify_all()
            else:
                del self._gates[ticket.key]

    # -- the thread -------------------------------------------------------------

    def _ensure_thread(self) -> None:
        # Called with the condition held.
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._main, name="jobs-lock-keeper", daemon=True
            )
            self._thread.start()

    def _main(self) -> None:
        role = self.sessions.open(
            "lock", worker_id=f"{self.holder_prefix}:keeper", outage=self.outage
        )
        role.bind()
        try:
            while True:
                work = self._next_work()
                if work is None:
                    return
                calls, due = work
                for call in calls:
                    self._run_call(call, role)
                for renewal in due:
                    self._renew(renewal, role)
        finally:
            # This thread's own connection (Django keeps one per thread).
            connections.close_all()

    def _next_work(self) -> tuple[list[_Call], list[Renewal]] | None:
        idle_since = time.monotonic()
        with self._cond:
            while True:
                now = time.monotonic()
                if self._calls:
                    calls = list(self._calls)
                    self._calls.clear()
                    due = [r for r in self._renewals if r.next_renew <= now]
                    return calls, due
                due = [r for r in self._renewals if r.next_renew <= now]
                if due:
                    return [], due
                if not self._renewals and now - idle_since >= IDLE_EXIT_S:
                    self._thread = None
                    return None
                wake = min(
                    (r.next_renew for r in self._renewals),
                    default=idle_since + IDLE_EXIT_S,
                )
                self._cond.wait(max(0.0, wake - now))

    def _run_call(self, call: _Call, role: Session) -> None:
        role.refresh()  # a connection the server closed while idle
        try:
            call.result = call.fn()
        except Exception as error:
            call.away = self.sessions.recover(role, error)
            call.error = error
        else:
            role.ok()
        with self._cond:
            abandoned = call.abandoned
            call.done.set()
        if abandoned and call.error is None and call.on_abandoned is not None:
            try:
                call.on_abandoned(call.result)
            except Exception as error:
                self.sessions.recover(role, error)
                logger.warning("jobs.lock.release-failed", exc_info=True)

    def _renew(self, renewal: Renewal, role: Session) -> None:
        now = time.monotonic()
        if now >= renewal.deadline:
            self._lose(renewal, "no renewal landed within the ttl")
            return
        pause = role.retry_in()
        if pause > 0:
            renewal.next_renew = now + pause
            return
        role.refresh()
        sent = time.monotonic()
        try:
            landed = self.store.renew(renewal.lease, round(renewal.ttl_s * 1000))
        except Exception as error:
            if not self.sessions.recover(role, error):
                logger.warning(
                    "jobs.lock.renewal-failed",
                    extra={"holder": renewal.lease.holder},
                    exc_info=True,
                )
            renewal.next_renew = time.monotonic() + RENEWAL_RETRY_S
            return
        role.ok()
        if not landed:
            self._lose(renewal, "the lease lapsed or another holder took it")
        elif time.monotonic() > renewal.deadline:
            self._lose(renewal, "the renewal landed after the ttl had run out")
        else:
            renewal.deadline = sent + renewal.ttl_s
            renewal.next_renew = sent + renewal.ttl_s / RENEWALS_PER_TTL

    def _lose(self, renewal: Renewal, why: str) -> None:
        with self._cond:
            self._renewals.discard(renewal)
        renewal.on_lost(renewal, why)


_KEEPERS: weakref.WeakKeyDictionary[Any, LockKeeper] = weakref.WeakKeyDictionary()
_KEEPERS_LOCK = threading.Lock()


def keeper_for(driver: JobDriver) -> LockKeeper:
    """The keeper of ``driver`` in this process (made on first use).

    A forked child makes its own: the parent's thread did not survive the
    fork, and the holder ids name the process.
    """
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(driver)
        if keeper is None or keeper.pid != os.getpid():
            keeper = _KEEPERS[driver] = LockKeeper(driver)
        return keeper
