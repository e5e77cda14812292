"""``lock()``: one holder fleet-wide, with a fencing token.

A lock is the single slot of lease key ``lock:<key>`` in the driver's lease
store (the table ``job(concurrency=...)`` uses; no new table). Its token is
the grant's fence, drawn from one sequence, so it is greater than every
earlier holder's: the app writes it beside its data and refuses smaller
ones (:func:`~django_ultimate_jobs.locks.fencing.fenced_update`). A lock is
renewed every ttl / 3 by the process's lock keeper; when it is lost its
``cancellation`` is set and leaving the block raises ``X_LOCK_LOST``, even
if the body succeeded, because its work was not exclusive.

Threads of one process queue for a key in the process (the keeper's gate),
so only one of them asks the database; it polls with backoff while another
process holds the key (10 ms doubling to 500 ms, equal jitter): a release
elsewhere is seen within half a second, one in this process at once.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import string
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ..durations import DurationInput, parse_duration_ms
from ..errors import (
    DriverUnavailable,
    DurationInvalid,
    JobsError,
    LockInvalid,
    LockNotAcquired,
)
from ..validation import text_problem
from .held import HeldLock, LockCancellation, lost_error
from .keeper import CallTimedOut, DatabaseAway, LockKeeper, Renewal, keeper_for

if TYPE_CHECKING:
    from ..drivers.base import JobDriver
    from ..drivers.lease_base import HeldLease

__all__ = [
    "LOCK_KEY_PREFIX",
    "MAX_LOCK_KEY_LENGTH",
    "MIN_LOCK_TTL_MS",
    "HeldLock",
    "Lock",
    "lock",
]

logger = logging.getLogger("django_ultimate_jobs")

P = ParamSpec("P")
R = TypeVar("R")

LOCK_KEY_PREFIX = "lock:"
MAX_LOCK_KEY_LENGTH = 200
MIN_LOCK_TTL_MS = 1_000
"""Renewals run every ttl / 3: a shorter ttl leaves a renewal less than 700 ms
of slack, which a loaded host or a slow statement eats (a 300 ms ttl lost its
lock to scheduling delays in a loaded test run)."""
FIRST_POLL_S = 0.01
MAX_POLL_S = 0.5
RELEASE_TIMEOUT_S = 5.0
"""How long leaving a block waits for the release (a stuck database: the
lease then lapses by its ttl)."""
_CALL_FLOOR_S = 1.0
"""A single try (``wait=0``) still gets this long for its one statement."""


class Lock:
    """What :func:`lock` returns: a context manager, and a decorator."""

    def __init__(
        self,
        key: str | Callable[..., str],
        ttl_ms: int,
        wait_ms: int,
        driver: JobDriver | None,
    ) -> None:
        self.key = key
        self.ttl_ms = ttl_ms
        self.wait_ms = wait_ms
        self.driver = driver
        self._local = threading.local()

    # -- context manager ---------------------------------------------------------

    def __enter__(self) -> HeldLock:
        if not isinstance(self.key, str):
            raise LockInvalid(
                "a lock keyed by a template or a callable is a decorator: "
                "use a plain string key in a with-statement"
            )
        taken = self._acquire(self.key)
        self._stack().append(taken)
        return taken[0]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        held, keeper, renewal = self._stack().pop()
        _leave(held, keeper, renewal, exc)

    def _stack(self) -> list[tuple[HeldLock, LockKeeper, Renewal]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # -- decorator -----------------------------------------------------------------

    def __call__(self, function: Callable[P, R]) -> Callable[P, R]:
        """Run ``function`` holding the lock (the key formatted from its arguments)."""
        if inspect.iscoroutinefunction(function):
            raise LockInvalid("lock() decorates plain functions, not async ones")
        key_of = _key_function(self.key, function)

        @functools.wraps(function)
        def locked(*args: P.args, **kwargs: P.kwargs) -> R:
            held, keeper, renewal = self._acquire(key_of(*args, **kwargs))
            try:
                result = function(*args, **kwargs)
            except BaseException as error:
                _leave(held, keeper, renewal, error)
                raise
            _leave(held, keeper, renewal, None)
            return result

        return locked

    # -- taking it -------------------------------------------------------------------

    def _acquire(self, key: str) -> tuple[HeldLock, LockKeeper, Renewal]:
        """Take the lock on ``key`` within ``wait``, or raise ``X_LOCK_NOT_ACQUIRED``."""
        _check_key(key)
        from ..drivers import get_driver

        keeper = keeper_for(self.driver or get_driver())
        lease_key = LOCK_KEY_PREFIX + key
        holder = f"{keeper.holder_prefix}:{uuid.uuid4().hex[:12]}"
        started = time.monotonic()
        deadline = started + self.wait_ms / 1000
        if not keeper.enter_gate(lease_key, deadline - started):
            raise _not_acquired(key, keeper, lease_key, started, None)
        try:
            lease, sent, away = self._try_until(keeper, lease_key, holder, deadline)
        except BaseException:
            keeper.exit_gate(lease_key)
            raise
        if lease is None:
            keeper.exit_gate(lease_key)
            raise _not_acquired(key, keeper, lease_key, started, away)
        return self._hold(key, lease, keeper, sent)

    def _try_until(
        self, keeper: LockKeeper, lease_key: str, holder: str, deadline: float
    ) -> tuple[HeldLease | None, float, BaseException | None]:
        """The grant (or ``None`` at the deadline), when its try was sent, and
        the last database failure met."""
        store = keeper.store
        poll = FIRST_POLL_S
        away: BaseException | None = None
        while True:
            sent = time.monotonic()
            try:
                lease = keeper.call(
                    lambda: store.acquire(lease_key, 1, self.ttl_ms, holder),
                    timeout=max(deadline - sent, _CALL_FLOOR_S),
                    on_abandoned=_release_abandoned(store),
                )
            except (DatabaseAway, CallTimedOut) as error:
                lease, away = None, error
            if lease is not None:
                return lease, sent, away
            left = deadline - time.monotonic()
            if left <= 0:
                return None, sent, away
            # Another process holds it: poll with backoff (equal jitter).
            time.sleep(min(poll / 2 + random.random() * poll / 2, left))
            poll = min(poll * 2, MAX_POLL_S)

    def _hold(
        self, key: str, lease: HeldLease, keeper: LockKeeper, sent: float
    ) -> tuple[HeldLock, LockKeeper, Renewal]:
        token = LockCancellation()
        ttl_s = self.ttl_ms / 1000

        def lost(renewal: Renewal, why: str) -> None:
            logger.warning(
                "jobs.lock.lost",
                extra={"key": key, "holder": lease.holder, "why": why},
            )
            token.cancel(lost_error(lease, why))

        renewal = Renewal(
            lease=lease,
            ttl_s=ttl_s,
            token=token,
            deadline=sent + ttl_s,
            next_renew=sent + ttl_s / 3,
            on_lost=lost,
        )
        token._renewal = renewal
        keeper.renew(renewal)
        return HeldLock(key, lease, token), keeper, renewal


def lock(
    key: str | Callable[..., str],
    *,
    ttl: DurationInput,
    wait: DurationInput | None = None,
    driver: JobDriver | None = None,
) -> Lock:
    """One holder fleet-wide for ``key``, as a context manager or a decorator.

    ::

        with lock(f"invoice:{invoice.pk}", ttl="30s", wait="5s") as held:
            held.fenced_update(Invoice.objects.filter(pk=invoice.pk), status="sent")

        @lock("invoice:{invoice_id}", ttl="30s")
        def send_invoice(invoice_id: int) -> None: ...

    Args:
        key: a non-blank string of at most 200 characters. As a decorator,
            also a ``str.format`` template over the function's parameter
            names (``"invoice:{invoice_id}"``) or a callable taking the
            function's arguments and answering the key.
        ttl: how long the lock outlives a holder that stopped renewing
            (crashed, frozen, cut off); renewed every ttl / 3 while held.
            At least 1s. ``"30s"``, a ``timedelta`` or int milliseconds.
        wait: how long to wait for the lock (default: one ``ttl``); ``0``
            tries once.
        driver: the driver whose lease store holds the lock (default: the
            installed one).

    Raises:
        LockInvalid: a bad key, ttl or wait (before any statement).
        LockNotAcquired: another holder kept it for the whole ``wait``
            (the error names that holder).
        LockLost: on leaving a block whose lock was lost.
    """
    if not isinstance(key, str) and not callable(key):
        raise LockInvalid(f"a lock key must be a string, not {type(key).__name__}")
    if isinstance(key, str):
        _check_key(key, template=True)
    ttl_ms = _duration(ttl, "ttl", allow_zero=False)
    if ttl_ms < MIN_LOCK_TTL_MS:
        raise LockInvalid(
            f"ttl must be at least {MIN_LOCK_TTL_MS // 1000}s, got {ttl!r:.40}"
        )
    wait_ms = ttl_ms if wait is None else _duration(wait, "wait", allow_zero=True)
    return Lock(key, ttl_ms, wait_ms, driver)


def _duration(value: Any, what: str, *, allow_zero: bool) -> int:
    try:
        return parse_duration_ms(value, what=what, allow_zero=allow_zero)
    except DurationInvalid as error:
        raise LockInvalid(error.cause, fix=error.fix or None) from error


def _check_key(key: str, *, template: bool = False) -> None:
    problem = text_problem(key, max_chars=MAX_LOCK_KEY_LENGTH)
    if problem is None and not key.strip():
        problem = "must not be blank"
    if problem is not None:
        what = "a lock key template" if template else "a lock key"
        raise LockInvalid(f"{what} {problem}")


def _key_function(
    key: str | Callable[..., str], function: Callable[..., Any]
) -> Callable[..., str]:
    signature = inspect.signature(function)
    if callable(key):
        return key
    fields = [name for _, name, _, _ in string.Formatter().parse(key) if name]
    unknown = [
        name
        for name in fields
        if name.split(".")[0].split("[")[0] not in signature.parameters
    ]
    if unknown:
        raise LockInvalid(
            f"the lock key template names {unknown} which "
            f"{function.__qualname__} has no parameter for",
            fix="name the function's parameters in the template, e.g. 'invoice:{invoice_id}'",
        )
    if not fields:
        return lambda *args, **kwargs: key

    def formatted(*args: Any, **kwargs: Any) -> str:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return key.format(**bound.arguments)

    return formatted


def _release_abandoned(store: Any) -> Callable[[HeldLease | None], None]:
    def release(lease: HeldLease | None) -> None:
        if lease is not None:
            store.release(lease)

    return release


def _leave(
    held: HeldLock, keeper: LockKeeper, renewal: Renewal, error: BaseException | None
) -> None:
    keeper.forget(renewal)
    try:
        keeper.call(lambda: keeper.store.release(held.lease), timeout=RELEASE_TIMEOUT_S)
    except Exception:
        # The lease lapses by its ttl anyway: a failed release never fails
        # the block (upstream's rule for slots too).
        logger.warning(
            "jobs.lock.release-failed", extra={"holder": held.holder}, exc_info=True
        )
    keeper.exit_gate(LOCK_KEY_PREFIX + held.key)
    # Decided after the release: the keeper is serial, so a renewal that was
    # in flight when the block ended has answered by now.
    lost = held.cancellation.is_set()
    held.cancellation._renewal = None  # a block that ended cannot lapse later
    if lost:
        reason = held.cancellation.reason
        raise (
            reason if reason is not None else lost_error(held.lease, "lost")
        ) from error


def _not_acquired(
    key: str,
    keeper: LockKeeper,
    lease_key: str,
    started: float,
    away: BaseException | None,
) -> JobsError:
    waited_ms = round((time.monotonic() - started) * 1000)
    try:
        holders = keeper.call(lambda: keeper.store.holders(lease_key), timeout=1.0)
    except Exception as error:
        away = away or error
        holders = []
    if not holders and away is not None:
        return DriverUnavailable(
            f"the lock could not be taken: the database did not answer ({away})",
            fix="check the database; the lock is tried again on the next call",
            meta={"key": key, "waited_ms": waited_ms},
        )
    holder = holders[0] if holders else "a holder that has just released it"
    return LockNotAcquired(
        f"the lock is held by {holder} (waited {timedelta(milliseconds=waited_ms)})",
        meta={
            "key": key,
            "holder": holders[0] if holders else None,
            "waited_ms": waited_ms,
        },
    )
