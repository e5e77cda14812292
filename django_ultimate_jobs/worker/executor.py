"""One attempt: run the body, then decide how the row settles.

The single execution path: the threaded worker, ``Worker.tick()`` and the
``run_jobs()`` test helper all run bodies through :func:`run_attempt`. It
never writes the settlement itself: it returns an :class:`Execution`
carrying the ack or nack to write, so the worker can batch settles.

An attempt can end three ways besides its body returning: its deadline
(the watchdog settles it as ``X_JOB_TIMEOUT`` while the body is abandoned),
the worker's drain cut-off (handed back uncounted), or a lost lease (the
row belongs to another attempt: nothing is written). :class:`Attempt`
makes sure exactly one of those settles the row.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from django.db import DEFAULT_DB_ALIAS

from .. import tracing
from ..context import CancellationToken, JobContext
from ..drivers.base import (
    MAX_ERROR_STACK_LENGTH,
    AckRequest,
    ClaimedJob,
    JobDriver,
    NackRequest,
    nack_state,
)
from ..drivers.steps import StepFence
from ..errors import (
    Aborted,
    JobInputInvalid,
    JobsError,
    code_of,
    interrupts_the_process,
)
from ..retry import decide_retry
from ..states import JobState
from ..steps import StepApi, StepSuspension
from .logfields import job_fields

if TYPE_CHECKING:
    from ..jobs import JobHandle

__all__ = ["Attempt", "Execution", "Outcome", "run_attempt"]

logger = logging.getLogger("django_ultimate_jobs")

Outcome = Literal[
    "completed",
    "retried",
    "dead-lettered",
    "dropped",
    "suspended",
    "interrupted",
    "lost",
    "refused",
]


@dataclass(slots=True)
class Execution:
    """How one attempt ended, and the settle that records it."""

    claimed: ClaimedJob
    outcome: Outcome
    duration_ms: int
    handle: JobHandle[Any] | None = None
    ack: AckRequest | None = None
    nack: NackRequest | None = None
    result: Any = None
    error: BaseException | None = None
    stop: str | None = None
    landed: bool | None = field(default=None)
    """Set after the settle: whether this worker still owned the row."""
    wake_step: str | None = None
    """A wait this run parked on: re-checked for events once the park lands."""
    writes: list[tuple[Callable[[list[Any]], None], Any]] | None = None
    """What the body gave ``ctx.write_on_ack``: written with the ack (.ackwrites)."""

    @property
    def ends_run(self) -> bool:
        """Whether the run is over (the ``on_settled`` outcomes)."""
        return self.outcome in ("completed", "dead-lettered", "dropped", "refused")


class Attempt:
    """One claimed job in flight: its token, deadline and the settle flag."""

    __slots__ = (
        "_settle_right",
        "abandoned",
        "claimed",
        "claimed_mono",
        "ctx",
        "deadline",
        "handle",
        "lost",
        "renewed",
        "started",
        "timeout_ms",
        "token",
    )

    def __init__(self, claimed: ClaimedJob, handle: JobHandle[Any] | None) -> None:
        self.claimed = claimed
        self.handle = handle
        self.token = CancellationToken()
        self.started = time.monotonic()
        self.claimed_mono = self.started
        self.renewed = self.started
        """When a lease renewal last landed (the worker's own clock)."""
        self.deadline: float | None = None
        self.timeout_ms: int | None = None
        self.ctx: JobContext | None = None
        self.abandoned = False
        self.lost: set[str] = set()
        """What this attempt lost (``"lease"``, ``"slot"``): each is reported once."""
        self._settle_right = [True]

    def start(self) -> None:
        """The body starts now: its duration and its deadline count from here."""
        self.started = time.monotonic()
        if self.handle is not None:
            self.timeout_ms = self.handle.timeout_for(self.claimed.input)
        if self.timeout_ms is not None:
            self.deadline = self.started + self.timeout_ms / 1000

    def take_settlement(self) -> bool:
        """Claim the right to settle this attempt (only the first caller wins)."""
        # list.pop() is atomic: exactly one caller gets the token. (A lock
        # per attempt was costly to build, and one shared lock was contended
        # by every slot thread.)
        try:
            self._settle_right.pop()
        except IndexError:
            return False
        return True

    @property
    def settled(self) -> bool:
        """Whether someone already took the settlement."""
        return not self._settle_right

    def elapsed_ms(self) -> int:
        """Milliseconds since the attempt started."""
        return round((time.monotonic() - self.started) * 1000)


def run_attempt(
    attempt: Attempt,
    driver: JobDriver,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Execution | None:
    """Run the body of ``attempt`` and return how it should settle.

    Returns ``None`` when somebody else (the watchdog, the drain) already
    settled the attempt: the body was abandoned and its result is dropped.
    With tracing on, the body runs in the attempt's consumer span.
    """
    if not tracing.enabled():
        return _run(attempt, driver, loop)
    with tracing.attempt(attempt.claimed) as span:
        execution = _run(attempt, driver, loop)
        if execution is None:
            span.ended(None, None, attempt.token.reason)
        else:
            span.ended(execution.outcome, _state_after(execution), execution.error)
        return execution


def _state_after(execution: Execution) -> str | None:
    """The row's state once this execution's settle lands (``None``: lost)."""
    if execution.ack is not None:
        return JobState.DONE.value
    if execution.nack is not None:
        return nack_state(execution.nack).value
    return None


def _run(
    attempt: Attempt, driver: JobDriver, loop: asyncio.AbstractEventLoop | None
) -> Execution | None:
    claimed, handle = attempt.claimed, attempt.handle
    assert handle is not None, "unknown jobs are parked before they run"
    ctx = JobContext(
        job_id=claimed.id,
        run_id=claimed.run_id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        tenant=claimed.tenant_id,
        enqueued_by=claimed.enqueued_by,
        cancellation=attempt.token,
        identity=claimed.identity,
        driver=driver,
    )
    ctx._step_factory = lambda: _step_api(attempt, driver)
    attempt.ctx = ctx
    error: BaseException | None = None
    result: Any = None
    try:
        if handle.input_schema is not None:
            _recheck_input(handle, claimed.input)
        attempt.token.raise_if_cancelled()
        if handle.is_async:
            result = _run_async(handle, ctx, claimed.input, attempt.token, loop)
        else:
            result = handle.func(ctx, **claimed.input)
    except BaseException as raised:
        # Everything the body raises fails this attempt, SystemExit and a
        # slot thread's KeyboardInterrupt too: re-raised, they ended the slot
        # thread and left the row running with nobody to settle it.
        if interrupts_the_process(raised):
            raise
        error = raised
    if not attempt.take_settlement():
        _report_abandoned(attempt, error)
        return None
    ctx.flush_progress()
    return settle_for(attempt, result=result, error=error)


def settle_for(
    attempt: Attempt, *, result: Any = None, error: BaseException | None = None
) -> Execution:
    """Build the settlement of an attempt that ended with ``result`` or ``error``."""
    claimed, handle = attempt.claimed, attempt.handle
    duration = attempt.elapsed_ms()
    reason = attempt.token.reason
    if reason is not None and reason.code == "X_JOB_LEASE_LOST":
        # The row belongs to another attempt or was cancelled: write nothing.
        return Execution(claimed, "lost", duration, handle, error=reason)
    if isinstance(error, StepSuspension):
        # A sleep or a wait: park the row until it is due, attempt unspent.
        nack = NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            run_at=error.resume_at,
            counts_as_attempt=False,
            park=True,
            duration_ms=duration,
        )
        execution = Execution(claimed, "suspended", duration, handle, nack=nack)
        execution.wake_step = error.step if error.reason == "event" else None
        return execution
    if reason is not None and reason.code == "X_DRAINING" and error is None:
        # The body finished before noticing the drain: its work is done.
        reason = None
    if reason is not None and reason.code == "X_DRAINING":
        nack = NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            error=reason.render(),
            counts_as_attempt=False,
            duration_ms=duration,
        )
        return Execution(
            claimed, "interrupted", duration, handle, nack=nack, error=reason
        )
    if error is None and reason is not None:
        # The body returned after its deadline passed: still a timeout.
        error = reason
    if error is None:
        ack = AckRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            duration_ms=duration,
            result=result,
        )
        writes = attempt.ctx.take_ack_writes() if attempt.ctx is not None else None
        return Execution(
            claimed,
            "completed",
            duration,
            handle,
            ack=ack,
            result=result,
            writes=writes,
        )
    if isinstance(error, Aborted) and reason is not None:
        error = reason
    return _failure(attempt, error, duration)


def _failure(attempt: Attempt, error: BaseException, duration: int) -> Execution:
    claimed, handle = attempt.claimed, attempt.handle
    assert handle is not None
    policy = handle.retry_policy(claimed.input)
    if policy.attempts != claimed.max_attempts:
        # The row's budget decides, as it does for the claim's burial: a
        # deploy that changed attempts= does not re-budget queued rows.
        policy = replace(policy, attempts=claimed.max_attempts)
    decision = decide_retry(policy, claimed.attempt, error)
    text = render_error(error)
    if decision.stopped_by == "terminal":
        text += f" — not retried: {code_of(error)} is classified terminal"
    stack = _stack(error)
    if decision.retry:
        nack = NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            delay_ms=decision.delay_ms,
            error=text,
            stack=stack,
            counts_as_attempt=decision.counts_as_attempt,
            duration_ms=duration,
        )
        return Execution(claimed, "retried", duration, handle, nack=nack, error=error)
    dead = policy.dead_letter
    nack = NackRequest(
        job_id=claimed.id,
        identity=claimed.identity,
        error=text,
        stack=stack,
        dead_letter=dead,
        fail=not dead,
        duration_ms=duration,
    )
    outcome: Outcome = "dead-lettered" if dead else "dropped"
    return Execution(
        claimed,
        outcome,
        duration,
        handle,
        nack=nack,
        error=error,
        stop=decision.stopped_by,
    )


def render_error(error: BaseException) -> str:
    """The text stored as ``last_error``: the code, cause and fix when coded."""
    if isinstance(error, JobsError):
        return error.render()
    message = str(error)
    code = code_of(error)
    name = type(error).__name__
    prefix = f"{code}: {name}" if code else name
    return f"{prefix}: {message}" if message else prefix


def _stack(error: BaseException) -> str:
    text = "".join(traceback.format_exception(error))
    return text[-MAX_ERROR_STACK_LENGTH:]


def _recheck_input(handle: JobHandle[Any], given: dict[str, Any]) -> None:
    try:
        handle.check_input(given)
    except JobInputInvalid as error:
        # A stored payload that no longer parses will never parse: stop now.
        raise JobInputInvalid(
            f"the stored input of {handle.name} no longer passes its input_schema",
            fix="python manage.py jobs show <id>, fix the payload or the schema",
            code="X_JOB_INPUT_INVALID",
        ) from error


def _run_async(
    handle: JobHandle[Any],
    ctx: JobContext,
    given: dict[str, Any],
    token: CancellationToken,
    loop: asyncio.AbstractEventLoop | None,
) -> Any:
    own_loop = loop is None
    event_loop = asyncio.new_event_loop() if own_loop else loop
    assert event_loop is not None
    try:
        task = event_loop.create_task(handle.func(ctx, **given))
        # A cancelled token cancels the task: the coroutine sees
        # CancelledError at its next await, and the token's reason wins.
        token.on_cancel(lambda _reason: event_loop.call_soon_threadsafe(task.cancel))
        try:
            return event_loop.run_until_complete(task)
        except asyncio.CancelledError:
            if token.reason is not None:
                raise token.reason from None
            raise
    finally:
        if own_loop:
            event_loop.close()


def _report_abandoned(attempt: Attempt, error: BaseException | None) -> None:
    reason = attempt.token.reason
    stopped_by_cancel = error is not None and (
        error is reason
        or code_of(error) in ("X_ABORTED", reason.code if reason else None)
    )
    if reason is not None and reason.code == "X_JOB_TIMEOUT" and not stopped_by_cancel:
        logger.warning(
            "jobs.timeout.abandoned",
            extra={
                **job_fields(attempt.claimed),
                "ended": "rejected" if error is not None else "resolved",
            },
        )


def attempt_now(attempt: Attempt, driver: JobDriver) -> datetime:
    """The database time of the claim, moved on by this worker's monotonic clock.

    A driver on a test clock (a ManualClock) answers that clock instead, so
    tests that move time see steps follow it exactly. Not ``driver.now()``:
    on PostgreSQL that is a round trip, and a step reads the time often.
    """
    clock = driver.clock
    if clock.sql_now() is not None:
        return clock.now()
    claimed_at = attempt.claimed.claimed_at or datetime.now(UTC)
    return claimed_at + timedelta(seconds=time.monotonic() - attempt.claimed_mono)


def _step_api(attempt: Attempt, driver: JobDriver) -> StepApi:
    claimed = attempt.claimed
    return StepApi(
        run_id=claimed.run_id,
        store=driver.steps,
        events=driver.events,
        fence=StepFence(claimed.id, claimed.identity),
        token=attempt.token,
        now=lambda: attempt_now(attempt, driver),
        step_timeout_ms=attempt.handle.step_timeout_ms if attempt.handle else None,
        # A store outside Django's databases (no alias): an atomic step's
        # work still runs in a transaction of the default database, as it
        # always did; its record cannot join it (features.atomic_steps).
        using=driver.alias or DEFAULT_DB_ALIAS,
    )
