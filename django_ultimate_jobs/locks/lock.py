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
import os
import random
import string
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar

from ..drivers import is_driver
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
from .keeper import (
    CallTimedOut,
    DatabaseAway,
    GateTicket,
    LockKeeper,
    Renewal,
    keeper_for,
)

if TYPE_CHECKING:
    from ..drivers.base import JobDriver
    from ..drivers.leases import HeldLease

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

_KEY_FIX = "pass a non-blank string of at most 200 characters without NUL"
_TEMPLATE_FIX = (
    "name the function's parameters in the template, e.g. 'invoice:{invoice_id}' "
    "(a key without fields is one fixed key; write {{ and }} for literal braces)"
)


class _Taken(NamedTuple):
    """One entered lock: what leaving it needs."""

    held: HeldLock
    keeper: LockKeeper
    renewal: Renewal
    ticket: GateTicket


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
                "a lock keyed by a callable is a decorator, not a with-statement",
                fix="use a plain string key in a with-statement: "
                "with lock(f'invoice:{invoice_id}', ttl='30s')",
            )
        taken = self._acquire(self.key)
        self._stack().append(taken)
        return taken.held

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stack = self._stack()
        if not stack:
            raise LockInvalid(
                "this lock was left without being entered in this thread "
                "(left twice, or __exit__ called without __enter__)",
                fix="use the lock in a with-statement; each with-block enters "
                "and leaves it once",
            )
        _leave(stack.pop(), exc)

    def __aenter__(self) -> None:
        """Refused: ``lock()`` is synchronous (``async with`` is not supported)."""
        raise _no_async_with()

    def __aexit__(self, *exc_info: object) -> None:
        """Refused, as :meth:`__aenter__` is (never reached)."""
        raise _no_async_with()

    def _stack(self) -> list[_Taken]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # -- decorator -----------------------------------------------------------------

    def __call__(self, function: Callable[P, R]) -> Callable[P, R]:
        """Run ``function`` holding the lock (the key formatted from its arguments)."""
        kind = _unlockable_kind(function)
        if kind is not None:
            raise LockInvalid(
                f"lock() decorates plain functions, not {kind} "
                f"({getattr(function, '__qualname__', function)!r:.80})",
                fix="take the lock inside the function with a with-statement "
                "around the work (a generator's body runs after the call "
                "returns, so a decorator's lock would not cover it)",
            )
        key_of = _key_function(self.key, function)

        @functools.wraps(function)
        def locked(*args: P.args, **kwargs: P.kwargs) -> R:
            taken = self._acquire(key_of(*args, **kwargs))
            try:
                result = function(*args, **kwargs)
            except BaseException as error:
                _leave(taken, error)
                raise
            _leave(taken, None)
            return result

        return locked

    # -- taking it -------------------------------------------------------------------

    def _acquire(self, key: str) -> _Taken:
        """Take the lock on ``key`` within ``wait``, or raise ``X_LOCK_NOT_ACQUIRED``."""
        _check_key(key)
        from ..drivers import get_driver

        keeper = keeper_for(self.driver or get_driver())
        lease_key = LOCK_KEY_PREFIX + key
        owner = keeper.gate_owner(lease_key)
        if (
            owner is not None
            and owner.thread == threading.get_ident()
            and not owner.is_lost()
        ):
            raise LockInvalid(
                f"this thread already holds the lock {key!r:.80}: locks are not "
                "re-entrant (waiting would deadlock on itself)",
                fix="take the lock once, around the outer call, and do not take "
                "it again inside",
                meta={"key": key, "holder": owner.holder},
            )
        ticket = GateTicket(
            lease_key, f"{keeper.holder_prefix}:{uuid.uuid4().hex[:12]}"
        )
        started = time.monotonic()
        deadline = started + self.wait_ms / 1000
        blocker = keeper.enter_gate(ticket, deadline - started)
        if blocker is not None:
            raise _kept_in_process(key, blocker, started)
        try:
            lease, sent, away = self._try_until(
                keeper, lease_key, ticket.holder, deadline
            )
        except BaseException:
            keeper.exit_gate(ticket)
            raise
        if lease is None:
            keeper.exit_gate(ticket)
            raise _not_acquired(key, keeper, lease_key, started, away)
        return self._hold(key, lease, keeper, ticket, sent)

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
        self,
        key: str,
        lease: HeldLease,
        keeper: LockKeeper,
        ticket: GateTicket,
        sent: float,
    ) -> _Taken:
        token = LockCancellation()
        ttl_s = self.ttl_ms / 1000

        def lost(renewal: Renewal, why: str) -> None:
            logger.warning(
                "jobs.lock.lost",
                extra={"key": key, "holder": lease.holder, "why": why},
            )
            token.cancel(lost_error(lease, why))
            # The next thread of this process may go to the database now.
            keeper.exit_gate(ticket)

        renewal = Renewal(
            lease=lease,
            ttl_s=ttl_s,
            token=token,
            deadline=sent + ttl_s,
            next_renew=sent + ttl_s / 3,
            on_lost=lost,
        )
        token._renewal = renewal
        ticket.lost = token.is_set
        ticket.granted = True
        keeper.renew(renewal)
        return _Taken(HeldLock(key, lease, token), keeper, renewal, ticket)


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
            names (``"invoice:{invoice_id}"``; no fields: one fixed key;
            positional fields refused) or a callable taking the function's
            arguments and answering the key.
        ttl: how long the lock outlives a holder that stopped renewing
            (crashed, frozen, cut off); renewed every ttl / 3 while held.
            At least 1s. ``"30s"``, a ``timedelta`` or int milliseconds.
        wait: how long to wait for the lock (default: one ``ttl``); ``0``
            or ``"0s"`` tries once.
        driver: the driver whose lease store holds the lock (default: the
            installed one).

    Locks are not re-entrant: taking a key this thread already holds is
    ``X_LOCK_INVALID`` at once. A lock belongs to the process that took it:
    a forked child leaving the block gets ``X_LOCK_LOST`` at once and
    leaves the parent's lock alone.

    Raises:
        LockInvalid: a bad key, ttl, wait or driver (before any statement);
            re-entry by the thread that holds the key.
        LockNotAcquired: another holder kept it for the whole ``wait``
            (the error names that holder).
        LockLost: on leaving a block whose lock was lost.
    """
    if not isinstance(key, str) and not callable(key):
        raise LockInvalid(
            f"a lock key must be a string, not {type(key).__name__}",
            fix="pass a string key such as 'invoice:42' (or, as a decorator, "
            "a template or a callable answering the key)",
        )
    if isinstance(key, str):
        _check_key(key)
    ttl_ms = _duration(ttl, "ttl", allow_zero=False, example="'30s'")
    if ttl_ms < MIN_LOCK_TTL_MS:
        raise LockInvalid(
            f"ttl must be at least {MIN_LOCK_TTL_MS // 1000}s, got {ttl!r:.40}",
            fix="pass ttl='1s' or more, e.g. ttl='30s' (renewals run every ttl / 3)",
        )
    wait_ms = (
        ttl_ms
        if wait is None
        else _duration(wait, "wait", allow_zero=True, example="'5s', or '0s'")
    )
    if driver is not None and not is_driver(driver):
        raise LockInvalid(
            f"driver must be a jobs driver, not {type(driver).__name__}",
            fix="leave driver out (the installed driver), or pass a driver "
            "object such as django_ultimate_jobs.drivers.get_driver()",
        )
    return Lock(key, ttl_ms, wait_ms, driver)


def _no_async_with() -> LockInvalid:
    return LockInvalid(
        "lock() is synchronous: it cannot be used with async with",
        fix="use a plain with-statement in synchronous code, e.g. in the "
        "body of a sync job, or run it in a thread: "
        "await asyncio.to_thread(locked_function)",
    )


def _duration(value: Any, what: str, *, allow_zero: bool, example: str) -> int:
    try:
        return parse_duration_ms(value, what=what, allow_zero=allow_zero)
    except DurationInvalid as error:
        raise LockInvalid(
            error.cause,
            fix=f"pass {what} as a duration such as {example}, a timedelta, "
            "or an int of milliseconds",
        ) from error


def _check_key(key: str) -> None:
    problem = text_problem(key, max_chars=MAX_LOCK_KEY_LENGTH)
    if problem is None and not key.strip():
        problem = "must not be blank"
    if problem is not None:
        raise LockInvalid(f"a lock key {problem}", fix=_KEY_FIX)


def _unlockable_kind(function: Callable[..., Any]) -> str | None:
    """What ``function`` is if a decorator's lock cannot cover its body."""
    if inspect.isasyncgenfunction(function):
        return "async generator functions"
    if inspect.iscoroutinefunction(function):
        return "async functions"
    if inspect.isgeneratorfunction(function):
        return "generator functions"
    return None


def _key_function(
    key: str | Callable[..., str], function: Callable[..., Any]
) -> Callable[..., str]:
    """The key of one call: the callable, or the template formatted from the
    call's arguments by parameter name (checked here, at decoration)."""
    if callable(key):
        return key
    signature = inspect.signature(function)
    fields = _template_fields(key, function)
    unknown = [
        name
        for name in fields
        if name.split(".")[0].split("[")[0] not in signature.parameters
    ]
    if unknown:
        raise LockInvalid(
            f"the lock key template names {unknown} which "
            f"{function.__qualname__} has no parameter for",
            fix=_TEMPLATE_FIX,
        )
    if not fields:
        # A fixed key: every call takes the same lock ("{{" stands for "{").
        fixed = key.format()
        return lambda *args, **kwargs: fixed

    def formatted(*args: Any, **kwargs: Any) -> str:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        try:
            return key.format(**bound.arguments)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            raise LockInvalid(
                f"the lock key template could not be formatted from "
                f"{function.__qualname__}'s arguments ({type(error).__name__})",
                fix=_TEMPLATE_FIX,
            ) from error

    return formatted


def _template_fields(key: str, function: Callable[..., Any]) -> list[str]:
    """The template's field names; refuses malformed and positional fields."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(key)]
    except ValueError as error:
        raise LockInvalid(
            f"the lock key template of {function.__qualname__} is not a valid "
            f"str.format template ({error})",
            fix=_TEMPLATE_FIX,
        ) from error
    names = [name for name in fields if name is not None]
    positional = [
        name for name in names if not name or name.split(".")[0].split("[")[0].isdigit()
    ]
    if positional:
        raise LockInvalid(
            f"the lock key template of {function.__qualname__} has a positional "
            f"field ({', '.join('{' + name + '}' for name in positional)}): fields "
            "name the function's parameters",
            fix=_TEMPLATE_FIX,
        )
    return names


def _release_abandoned(store: Any) -> Callable[[HeldLease | None], None]:
    def release(lease: HeldLease | None) -> None:
        if lease is not None:
            store.release(lease)

    return release


def _leave(taken: _Taken, error: BaseException | None) -> None:
    held, keeper = taken.held, taken.keeper
    if keeper.pid == os.getpid():
        keeper.forget(taken.renewal)
        _release(held, keeper)
        keeper.exit_gate(taken.ticket)
    # else: a forked child. The lock is its parent's (whose keeper thread did
    # not survive the fork): leave the row and the gate alone; is_set() below
    # reads the lock as lost in this process.
    # Decided after the release: the keeper is serial, so a renewal that was
    # in flight when the block ended has answered by now.
    lost = held.cancellation.is_set()
    held.cancellation._renewal = None  # a block that ended cannot lapse later
    if not lost:
        return
    reason = held.cancellation.reason or lost_error(held.lease, "lost")
    if error is not None and not isinstance(error, Exception):
        # Ctrl-C, sys.exit(), a closed generator: not swallowed by an
        # ``except Exception`` as X_LOCK_LOST would be. The loss is logged.
        logger.warning(
            "jobs.lock.lost",
            extra={
                "key": held.key,
                "holder": held.holder,
                "why": f"{reason.cause}; the block was left by "
                f"{type(error).__name__}, which goes on unchanged",
            },
        )
        return
    raise reason from error


def _release(held: HeldLock, keeper: LockKeeper) -> None:
    """Delete the lock's row; a failure is logged (the row lapses by its ttl)."""
    try:
        keeper.call(lambda: keeper.store.release(held.lease), timeout=RELEASE_TIMEOUT_S)
    except (DatabaseAway, CallTimedOut) as failure:
        # Expected while the database is away: one line, no traceback. A
        # failed release never fails the block (upstream's rule for slots).
        logger.warning(
            "jobs.lock.release-failed",
            extra={
                "holder": held.holder,
                "error": f"{type(failure).__name__}: {failure}",
            },
        )
    except Exception:
        logger.warning(
            "jobs.lock.release-failed", extra={"holder": held.holder}, exc_info=True
        )


def _kept_in_process(key: str, blocker: GateTicket, started: float) -> JobsError:
    """``X_LOCK_NOT_ACQUIRED``: another thread of this process kept the key."""
    waited_ms = round((time.monotonic() - started) * 1000)
    waited = timedelta(milliseconds=waited_ms)
    if blocker.granted:
        cause = (
            f"the lock is held by {blocker.holder}, another thread of this "
            f"process (waited {waited})"
        )
    else:
        cause = (
            f"another thread of this process ({blocker.holder}) was still "
            f"asking the database for the lock (waited {waited})"
        )
    return LockNotAcquired(
        cause,
        meta={
            "key": key,
            "holder": blocker.holder if blocker.granted else None,
            "waited_ms": waited_ms,
        },
    )


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
    waited = timedelta(milliseconds=waited_ms)
    if holders:
        cause = f"the lock is held by {holders[0]} (waited {waited})"
    else:
        cause = (
            f"every try within the wait found the lock held, and its holder "
            f"released it (or it lapsed) just as the wait ended (waited {waited})"
        )
    return LockNotAcquired(
        cause,
        meta={
            "key": key,
            "holder": holders[0] if holders else None,
            "waited_ms": waited_ms,
        },
    )
