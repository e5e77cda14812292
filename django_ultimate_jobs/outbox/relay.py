"""The relay: publish committed outbox messages as jobs, in stage order.

One pass (:meth:`OutboxRelay.run_pass`, upstream §17.6):

1. claim up to ``batch`` unpublished messages with a lease (``claimed_by`` =
   this relay's token), in ``(staged_at, id)`` order;
2. publish them through the driver's own ``enqueue_many``, each under the
   id the enqueuer was answered: a message published twice (a relay killed
   after publishing and before marking) meets its job and inserts nothing;
3. mark them published (only where this relay still holds the claim).

A publish that fails stops the batch at the first message that fails
(later messages never overtake it: ``create_invoice`` staged before
``charge_card`` is never published after it); the ones before it are
marked, it and the rest are released at once with the error recorded
(``jobs.outbox.publish-failed``). A poisoned message therefore holds up
the messages staged after it, visibly, by design.

Two ways a relay runs, one class:

- the **in-process relay** (:func:`local_relay`): a daemon thread per
  process, woken by the ``transaction.on_commit`` callback of a transaction
  that staged messages. It waits for nothing else: no polling in a web
  process. After a failed pass it retries on the outage schedule until a
  pass gets through.
- the **relay role of runjobs** (``poll=True``): the same loop that also
  sweeps on an idle backoff (at start, then 200 ms doubling to
  ``OUTBOX_SWEEP_MAX``, 30 s), so it publishes what no callback did: a
  process killed between its COMMIT and its callback, or a callback never
  run because another app's earlier ``on_commit`` callback raised. That is
  a safety net, not the path of a commit (its own process publishes it at
  once), so its ceiling is long: an idle ``runjobs`` sends 2 sweeps a
  minute, not 30. A failed pass is retried at most ``IDLE_POLL_MAX`` apart.

The thread owns its connections, each a session named ``relay``, reset
after a lost connection and retried on the process-wide outage schedule:
the outbox database's (a :class:`~django_ultimate_jobs.drivers.postgres.sessions.RoleConnection`:
the outbox is a table of a Django database) and, when the jobs are stored
elsewhere, the driver's (``driver.sessions``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from .. import tracing
from ..conf import jobs_settings
from ..drivers import get_driver
from ..drivers.base import JobDriver
from ..drivers.djangodb import close_thread_connections
from ..drivers.outage import DatabaseOutage, process_outage
from ..drivers.postgres.sessions import RoleConnection
from ..drivers.sessions import Session
from ..errors import JobsError
from ..faults import AFTER_OUTBOX_PUBLISH, fault_point
from ..worker.backoff import IdleBackoff
from .store import Claimed, OutboxStore, outbox_database

__all__ = [
    "DEFAULT_BATCH",
    "OutboxRelay",
    "PassOutcome",
    "install_local_relay",
    "local_relay",
    "publish_pending",
]

logger = logging.getLogger("django_ultimate_jobs")

DEFAULT_BATCH = 1_000
"""Messages one pass claims. Upstream's batchSize is 100; a pass costs three
round trips whatever its size, so 1,000 publishes a burst (a committed
``enqueue_many``) several times faster (bench/outbox.py), and a pass of
1,000 still takes well under a second of the claim lease."""
FLOOR_S = 0.2
"""The relay role's first idle wait (upstream's intervalMs)."""
INLINE_BATCH = DEFAULT_BATCH
EXIT_BOUND_S = 5.0
"""How long a process's exit waits for its in-process relay to publish
what it was woken for (then it releases its claims and exits)."""
RETRY_CHECK_S = 0.05
IDLE_CLOSE_S = 1.0
"""An in-process relay idle this long closes its connections until the next wake."""


@dataclass(frozen=True, slots=True)
class PassOutcome:
    """What one pass did."""

    claimed: int
    published: int
    failed: bool = False
    """A publish failed: the batch stopped there and the rest was released."""


class OutboxRelay:
    """Publishes outbox messages; a thread (:meth:`start`) or inline passes."""

    def __init__(
        self,
        *,
        poll: bool = False,
        worker_id: str | None = None,
        outage: DatabaseOutage | None = None,
        driver: JobDriver | None = None,
        batch: int = DEFAULT_BATCH,
    ) -> None:
        settings = jobs_settings()
        self.poll = poll
        self.batch = batch
        self.lease_ms = settings.outbox_claim_lease_ms
        self.store = OutboxStore(outbox_database())
        self._driver = driver
        suffix = uuid.uuid4().hex[:8]
        self.worker_id = worker_id or f"relay:{os.getpid()}:{suffix}"
        self.token = f"{self.worker_id}:{suffix}"
        # The process's (a web process's locks share it): one report per outage.
        self.outage = outage = outage or process_outage()
        self.roles: list[Session] = [
            RoleConnection(
                "relay",
                using=settings.outbox_database,
                worker_id=self.worker_id,
                outage=outage,
            )
        ]
        jobs = self.driver
        if jobs.alias != settings.outbox_database:
            self.roles.append(
                jobs.sessions.open("relay", worker_id=self.worker_id, outage=outage)
            )
        self.retry_max_s = settings.idle_poll_max_ms / 1000
        """The longest wait before retrying a pass that failed."""
        ceiling = settings.outbox_sweep_max_ms / 1000 if poll else self.retry_max_s
        self.backoff = IdleBackoff(FLOOR_S, ceiling, ceiling)
        """Idle sweeps (``poll``); the retries after a failed publish too,
        capped at :attr:`retry_max_s`."""
        self.idle_close_s = IDLE_CLOSE_S
        self.published = 0
        """Messages this relay published (for tests and the bench)."""
        self.passes = 0
        self._failing: str | None = None
        """What the last failed pass failed with (logged once until a pass
        gets through)."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def driver(self) -> JobDriver:
        """The driver publishes go through (the installed one by default)."""
        return self._driver or get_driver()

    # -- the thread ------------------------------------------------------------

    def start(self) -> None:
        """Start the relay thread (once)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._main, name="jobs-relay", daemon=True
            )
            self._thread.start()

    def wake(self) -> None:
        """A transaction that staged messages committed: pass now."""
        self._wake.set()
        if self._thread is None:
            self.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread after the pass in flight."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def finish(self, timeout: float = EXIT_BOUND_S) -> None:
        """Publish what is pending, then stop; release what is still held.

        For a process that exits (an ``atexit`` hook, see
        :func:`local_relay`): the thread passes until a pass finds less
        than a batch, for at most ``timeout``; then the claims this relay
        still holds (a pass cut short) are handed back at once, so the next
        relay need not wait out ``OUTBOX_CLAIM_LEASE`` for them.
        """
        if self._thread is not None and self._thread.is_alive():
            self._drain.set()
            self._wake.set()
            self._thread.join(timeout)
        self._stop.set()
        self._wake.set()
        try:
            self.store.release_claimant(self.token)
        except Exception:
            # The database is away: the lease frees them instead.
            logger.debug("jobs.outbox.release-failed", exc_info=True)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called (a stopped relay never runs again)."""
        return self._stop.is_set()

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _main(self) -> None:
        for role in self.roles:
            role.bind()
        # A poll relay starts with a sweep: what a dead process left.
        wait: float | None = 0.0 if self.poll else None
        try:
            while not self._stop.is_set():
                if wait is None:
                    # Idle, waiting for a commit: keep the connections for
                    # a burst of commits, then let them go (a web process
                    # holds none while idle; a test database can be dropped).
                    if not self._wake.wait(self.idle_close_s):
                        close_thread_connections()
                        self._wake.wait()
                elif wait > 0:
                    self._wake.wait(wait)
                self._wake.clear()
                if self._stop.is_set():
                    return
                wait = self._cycle()
                if self._drain.is_set() and wait != 0.0:
                    return  # finishing: nothing more to publish now
        finally:
            connections.close_all()

    def _cycle(self) -> float | None:
        """One pass; answers how long to wait before the next (None: a wake)."""
        if any(role.failing for role in self.roles):
            # One question for all roles (they share the outage): asking
            # each would book a try for the first and delay the others.
            pause = self.outage.retry_in()
            if pause > 0:
                return pause
        try:
            for role in self.roles:
                role.refresh()
            outcome = self.run_pass()
        except Exception as error:
            away = [role.failed(error) for role in self.roles]
            if not any(away):
                self._tick_failed(error)
                # A cause that is not an outage (a table not migrated, a bug)
                # does not go away in 200 ms: retry at the idle maximum.
                return self.retry_max_s
            return RETRY_CHECK_S  # the outage schedule paces the next try
        for role in self.roles:
            role.ok()
        if self._failing is not None:
            logger.warning(
                "jobs.outbox.tick-recovered",
                extra={"relay": self.worker_id, "error": self._failing},
            )
            self._failing = None
        if outcome.failed:
            # A poisoned message or a refused publish: retried on the
            # worker's idle cadence, not the sweep's (an operator fixing it
            # sees it go within IDLE_POLL_MAX).
            return min(self.backoff.next_wait(), self.retry_max_s)
        if outcome.claimed >= self.batch:
            self.backoff.reset()
            return 0.0  # more are waiting
        if outcome.claimed:
            self.backoff.reset()
        return self.backoff.next_wait() if self.poll else None

    def _tick_failed(self, error: Exception) -> None:
        """Log a failed pass once per cause (then DEBUG until one gets through)."""
        cause = _text(error)
        if cause == self._failing:
            logger.debug("jobs.outbox.tick-failed", extra={"relay": self.worker_id})
            return
        self._failing = cause
        extra = {"relay": self.worker_id, "error": cause}
        if isinstance(error, JobsError):
            # A coded error says what is wrong and what to do: no traceback.
            extra.update(code=error.code, fix=error.fix)
            logger.error("jobs.outbox.tick-failed", extra=extra)
        else:
            logger.exception("jobs.outbox.tick-failed", extra=extra)

    # -- one pass --------------------------------------------------------------

    def run_pass(self) -> PassOutcome:
        """Claim, publish and mark one batch (in the calling thread)."""
        self.passes += 1
        claimed = self.store.claim(self.token, limit=self.batch, lease_ms=self.lease_ms)
        if not claimed:
            return PassOutcome(0, 0)
        if tracing.enabled():
            with tracing.relaying([c.request for c in claimed]) as span:
                published, failure = self._publish(claimed)
                span.published(len(published), failure)
        else:
            published, failure = self._publish(claimed)
        fault_point(AFTER_OUTBOX_PUBLISH)
        self.store.mark_published([c.id for c in published], self.token)
        self.published += len(published)
        if failure is None:
            return PassOutcome(len(claimed), len(published))
        rest = claimed[len(published) :]
        self.store.release(
            [c.id for c in rest], self.token, failed=rest[0].id, error=_text(failure)
        )
        logger.warning(
            "jobs.outbox.publish-failed",
            extra={
                "outbox_message": str(rest[0].id),
                "job": rest[0].request.name,
                "released": len(rest),
                "error": _text(failure),
                "fix": "the message is retried on the next pass; the admin's "
                "outbox page shows its error",
            },
        )
        return PassOutcome(len(claimed), len(published), failed=True)

    def _publish(
        self, claimed: Sequence[Claimed]
    ) -> tuple[Sequence[Claimed], BaseException | None]:
        """Publish in order; answers those published and the first failure."""
        driver = self.driver
        try:
            with _savepoint():
                driver.enqueue_many([c.request for c in claimed])
            return claimed, None
        except Exception as error:
            if driver.sessions.is_unavailable(error):
                # The jobs database is away: hand the batch back now if the
                # outbox's answers (else its lease lapses), and fail the pass.
                self._release_quietly(claimed, error)
                raise
        # One statement refused the batch: find the first message that fails.
        for index, message in enumerate(claimed):
            try:
                with _savepoint():
                    driver.enqueue(message.request)
            except Exception as error:
                return claimed[:index], error
        return claimed, None

    def _release_quietly(self, claimed: Sequence[Claimed], error: Exception) -> None:
        try:
            self.store.release(
                [c.id for c in claimed],
                self.token,
                failed=claimed[0].id,
                error=_text(error),
            )
        except Exception:
            logger.debug("jobs.outbox.release-failed", exc_info=True)


def _savepoint() -> AbstractContextManager[Any]:
    """A savepoint when publishing inside a transaction (tests), else nothing.

    A refused statement must not abort the caller's transaction (the
    release after it runs there too); the relay thread runs in autocommit,
    where a savepoint would cost two more round trips per publish.
    """
    alias = jobs_settings().database
    if connections[alias].in_atomic_block:
        return transaction.atomic(using=alias)
    return nullcontext()


def _text(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


# -- the process's relay ---------------------------------------------------------

_local: OutboxRelay | None = None
_local_pid: int | None = None
_local_lock = threading.Lock()
_exit_hooked: int | None = None
"""The pid that registered :func:`_finish_at_exit` (a fork registers again)."""


def local_relay() -> OutboxRelay:
    """This process's relay (built on first use; a forked child, or a use
    after the relay was stopped, builds a new one)."""
    global _local, _local_pid, _exit_hooked
    with _local_lock:
        if _local is None or _local_pid != os.getpid() or _local.stopped:
            _local, _local_pid = OutboxRelay(), os.getpid()
            if _exit_hooked != os.getpid():
                atexit.register(_finish_at_exit)
                _exit_hooked = os.getpid()
        return _local


def _finish_at_exit() -> None:
    """At interpreter exit: this process's relay publishes what it was woken
    for (at most ``EXIT_BOUND_S``) and releases what it still holds.

    Without it a script or ``manage.py shell`` that commits and exits kills
    the daemon thread mid-pass: messages left unpublished until some relay
    sweeps, or claimed and blocked for the whole claim lease. A process
    killed outright (SIGKILL) runs no hook: see the how-to.
    """
    relay = _local
    if relay is None or _local_pid != os.getpid() or relay.stopped:
        return
    relay.finish(EXIT_BOUND_S)


def install_local_relay(relay: OutboxRelay | None) -> OutboxRelay | None:
    """Make ``relay`` the one commit callbacks wake (runjobs' relay role).

    Returns the relay installed before; ``None`` goes back to building one.
    """
    global _local, _local_pid
    with _local_lock:
        previous = _local
        _local, _local_pid = relay, os.getpid() if relay is not None else None
        return previous


def publish_pending(*, driver: JobDriver | None = None) -> int:
    """Publish every pending outbox message now, in this thread; answers how many.

    For tests: under Django's ``TestCase`` nothing commits, so no callback
    wakes a relay, and a relay thread could not see the test's rows anyway.
    ``run_jobs()`` calls this first when ``ULTIMATE_JOBS["OUTBOX"]`` is on.
    A message that fails to publish stops the run (it stays pending).
    """
    relay = OutboxRelay(driver=driver, batch=INLINE_BATCH)
    while True:
        outcome = relay.run_pass()
        if outcome.failed or outcome.claimed < relay.batch:
            return relay.published
