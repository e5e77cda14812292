"""What a handler receives: :class:`JobContext` and its :class:`CancellationToken`.

Python threads cannot be killed, so cancellation is cooperative: the token
is set (attempt deadline, lease lost, operator cancel, worker drain), step
and progress writes are refused from then on, and a body that loops should
check ``ctx.cancellation`` and stop.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from .errors import Aborted, JobProgressInvalid, JobsError, RetryClass
from .validation import storable

if TYPE_CHECKING:
    from .drivers.base import ClaimIdentity, JobDriver
    from .steps import StepApi

__all__ = ["CancellationToken", "JobContext", "JobWriteInvalid"]

logger = logging.getLogger("django_ultimate_jobs")

PROGRESS_INTERVAL_S = 1.0
MAX_PROGRESS_NOTE_LENGTH = 200


class JobWriteInvalid(JobsError):
    """``ctx.write_on_ack()`` was given a writer it cannot call."""

    code = "X_JOB_WRITE_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = "pass a plain function that takes a list of items"


_TOKENS_LOCK = threading.Lock()


class CancellationToken:
    """Set once, with a reason; the first reason wins.

    Cheap to create (one per attempt): the event behind :meth:`wait` is
    only built when somebody waits, and every token shares one lock (taken
    only to cancel, wait or register a callback, all rare), since building a
    lock per attempt was a measurable share of a no-op job.
    """

    __slots__ = ("_callbacks", "_event", "_reason")

    def __init__(self) -> None:
        self._event: threading.Event | None = None
        self._reason: JobsError | None = None
        self._callbacks: list[Callable[[JobsError], object]] = []

    def is_set(self) -> bool:
        """Whether the attempt was asked to stop."""
        return self._reason is not None

    @property
    def reason(self) -> JobsError | None:
        """Why it was cancelled (``X_JOB_TIMEOUT``, ``X_DRAINING``...), or None."""
        return self._reason

    def raise_if_cancelled(self) -> None:
        """Raise the cancellation reason if the token is set."""
        if self._reason is not None:
            raise self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds pass; True if cancelled.

        Use it instead of ``time.sleep`` inside handlers: a drain or a
        timeout then interrupts the wait at once.
        """
        with _TOKENS_LOCK:
            if self._reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def cancel(self, reason: JobsError) -> bool:
        """Set the token (first reason wins); True if this call set it."""
        with _TOKENS_LOCK:
            if self._reason is not None:
                return False
            self._reason = reason
            callbacks, self._callbacks = self._callbacks, []
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:  # a callback must not stop the others
                logger.exception("jobs.cancellation.callback-failed")
        return True

    def on_cancel(self, callback: Callable[[JobsError], object]) -> None:
        """Call ``callback(reason)`` when set (at once if already set)."""
        with _TOKENS_LOCK:
            if self._reason is None:
                self._callbacks.append(callback)
                return
            reason = self._reason
        callback(reason)


class JobContext:
    """The first argument of every handler.

    Attributes:
        job_id: the job row's id.
        run_id: stable across retries and suspensions (steps hang off it).
        attempt: 1-based; never branch on ``attempt == 1`` for correctness.
        final_attempt: a failure now will not be retried for lack of attempts.
        tenant: the job's declared tenant (``None`` for tenantless jobs).
        enqueued_by: who enqueued it (attribution only, never authority).
        queue: the queue it was claimed from.
        name: the job name.
        cancellation: the attempt's :class:`CancellationToken`.
        logger: a logger adapter carrying the job's name and id.
    """

    def __init__(
        self,
        *,
        job_id: UUID,
        run_id: UUID,
        name: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        tenant: str | None,
        enqueued_by: str | None,
        cancellation: CancellationToken,
        identity: ClaimIdentity | None = None,
        driver: JobDriver | None = None,
    ) -> None:
        self.job_id = job_id
        self.run_id = run_id
        self.name = name
        self.queue = queue
        self.attempt = attempt
        self.final_attempt = attempt >= max_attempts
        self.tenant = tenant
        self.enqueued_by = enqueued_by
        self.cancellation = cancellation
        self._identity = identity
        self._driver = driver
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None
        self._step: StepApi | None = None
        self._step_factory: Callable[[], StepApi | None] | None = None
        self._pending: dict[str, Any] | None = None
        self._last_write = -math.inf
        self._ack_writes: list[tuple[Callable[[list[Any]], None], Any]] | None = None

    def __repr__(self) -> str:
        return f"<JobContext {self.name} {self.job_id} attempt={self.attempt}>"

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger carrying the job's name, id, run id, attempt and queue."""
        if self._logger is None:
            self._logger = _JobLogger(
                logging.getLogger("django_ultimate_jobs.job"), self.log_fields()
            )
        return self._logger

    def log_fields(self) -> dict[str, Any]:
        """The job's identity as a log record's ``extra`` (docs/reference/logging.md)."""
        return {
            "job": self.name,
            "job_id": str(self.job_id),
            "run_id": str(self.run_id),
            "attempt": self.attempt,
            "queue": self.queue,
        }

    @property
    def step(self) -> StepApi:
        """Durable steps of this run (``run``, ``sleep``, ``wait_for_event``).

        Built on first use: a job without steps pays nothing for them.
        """
        if self._step is None and self._step_factory is not None:
            self._step = self._step_factory()
        if self._step is None:
            raise AttributeError("durable steps need a driver with a step store")
        return self._step

    @property
    def worker_id(self) -> str | None:
        """The id of the worker process running this attempt."""
        return self._identity.worker_id if self._identity else None

    @property
    def claim(self) -> int | None:
        """The claim ordinal of this attempt: it fences every write it makes.

        Grows with every claim of the job (retries, lapsed leases, drains),
        so an app can fence its own writes with it.
        """
        return self._identity.claim if self._identity else None

    def progress(self, done: float, total: float, note: str | None = None) -> None:
        """Report progress; stored at most once a second, the last one always.

        A failed write is logged and never fails the job; a bad value is
        refused, never dropped or cut.

        Raises:
            Aborted: the attempt was cancelled (its writes are refused).
            JobProgressInvalid: ``done`` or ``total`` is not a finite number,
                or ``note`` is not a string of at most 200 characters that
                PostgreSQL can store (no NUL, no lone surrogate).
        """
        if self.cancellation.is_set():
            raise Aborted("progress written after the attempt was cancelled")
        _check_progress(done, total, note)
        value: dict[str, Any] = {"done": done, "total": total}
        if note:
            value["note"] = note
        self._pending = value
        if time.monotonic() - self._last_write >= PROGRESS_INTERVAL_S:
            self.flush_progress()

    def write_on_ack(self, writer: Callable[[list[Any]], None], item: Any) -> None:
        """Have the worker write ``item`` with this attempt's success.

        The worker's settle thread calls ``writer`` once per batch, with the
        items of every attempt in the batch that gave it that writer. With
        the Postgres driver it runs in the transaction that marks those jobs
        done, on the jobs database's connection: its writes there commit
        with the done mark or not at all, and only for attempts whose ack
        lands (one that failed, suspended, was cut off or lost its lease
        writes nothing). With a store outside Django's databases it runs
        just before the acks, so it must be idempotent.

        Keep it fast: every job of the worker waits for its batch. A writer
        that raises is logged ``jobs.settle.write-failed`` and its items are
        dropped; the jobs still end done.

        Raises:
            JobWriteInvalid: ``writer`` is not a plain callable (an
                ``async def`` function is refused: nothing would await it).
        """
        if not callable(writer) or _runs_later(writer):
            raise JobWriteInvalid(
                "ctx.write_on_ack(writer, item): writer must be a plain function "
                f"taking a list of items, not {writer!r}"
            )
        if self._ack_writes is None:
            self._ack_writes = []
        self._ack_writes.append((writer, item))

    def take_ack_writes(self) -> list[tuple[Callable[[list[Any]], None], Any]] | None:
        """The writes :meth:`write_on_ack` queued, handed over once (the executor's)."""
        writes, self._ack_writes = self._ack_writes, None
        return writes

    def flush_progress(self) -> None:
        """Write the pending progress now (the executor calls it before settling)."""
        value, self._pending = self._pending, None
        if value is None or self._driver is None or self._identity is None:
            return
        self._last_write = time.monotonic()
        stamped: Mapping[str, Any] = {**value, "at": time.time()}
        try:
            self._driver.record_progress(self.job_id, self._identity, stamped)
        except Exception:
            logger.warning("jobs.progress.failed", extra=self.log_fields())


def _runs_later(writer: Any) -> bool:
    """Whether calling ``writer`` answers a coroutine or a generator instead of
    writing (an ``async def``, also as a partial or an object's ``__call__``)."""
    target = getattr(writer, "func", writer)  # functools.partial
    method = (
        None
        if inspect.isroutine(target)
        else inspect.getattr_static(type(target), "__call__", None)
    )
    candidates = (target, method)
    return any(
        check(candidate)
        for candidate in candidates
        if candidate is not None
        for check in (
            inspect.iscoroutinefunction,
            inspect.isgeneratorfunction,
            inspect.isasyncgenfunction,
        )
    )


def _check_progress(done: Any, total: Any, note: Any) -> None:
    for name, value in (("done", done), ("total", total)):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise JobProgressInvalid(
                f"ctx.progress({name}=...) must be an int or a float, "
                f"not {type(value).__name__}"
            )
        if not math.isfinite(value):
            raise JobProgressInvalid(
                f"ctx.progress({name}=...) must be finite, not {value}"
            )
    if note is not None and not isinstance(note, str):
        raise JobProgressInvalid(
            f"ctx.progress(note=...) must be a string, not {type(note).__name__}"
        )
    if note is not None and not storable(note):
        raise JobProgressInvalid(
            "ctx.progress(note=...) holds a NUL or a lone surrogate, which "
            "PostgreSQL cannot store"
        )
    if note is not None and len(note) > MAX_PROGRESS_NOTE_LENGTH:
        raise JobProgressInvalid(
            f"ctx.progress(note=...) holds {len(note)} characters; "
            f"at most {MAX_PROGRESS_NOTE_LENGTH} are stored",
            meta={"length": len(note), "limit": MAX_PROGRESS_NOTE_LENGTH},
        )


class _JobLogger(logging.LoggerAdapter[logging.Logger]):
    """Adds the job's fields to a call's own ``extra=`` (the stock adapter replaces it).

    The job's fields win over a same-named key of the call's: a line cannot
    claim another job's id.
    """

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(kwargs.get("extra") or {}), **(self.extra or {})}
        return msg, kwargs
