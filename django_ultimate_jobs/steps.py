"""Durable steps: ``ctx.step.run / sleep / sleep_until / wait_for_event``.

Each attempt replays the body from its first line; a step whose result was
recorded returns it from storage without running again (the retry unit is
the step, and its name is the replay key). Every step write is fenced on
the attempt's claim. A sleep or a wait suspends the job: the body stops
with :class:`StepSuspension`, the worker parks the row (``suspended``, no
slot, no attempt spent) and a later claim replays it.

Time: "now" is the database clock at the claim, moved on by the worker's
monotonic clock since, so sleeps and wait deadlines follow the database
(a skewed worker clock cannot shorten them).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction

from . import tracing
from .context import CancellationToken
from .durations import (
    MAX_DURATION,
    MAX_DURATION_TEXT,
    DurationInput,
    parse_duration_ms,
)
from .errors import (
    Aborted,
    DurationInvalid,
    JobEventInvalid,
    JobsError,
    JobTimeout,
    StepAtomicUnsupported,
    StepDuplicate,
    StepNameInvalid,
    StepOutputUnserializable,
)
from .events import check_event_names
from .faults import AFTER_STEP_COMMIT, fault_point
from .validation import (
    MAX_KEY_BYTES,
    JsonRefused,
    json_text,
    schema_issues,
    storable_text,
    text_problem,
)

if TYPE_CHECKING:
    from .drivers.steps import EventStore, StepFence, StepRecord, StepStore

__all__ = ["WAIT_TIMED_OUT", "StepApi", "StepSuspension"]

logger = logging.getLogger("django_ultimate_jobs")

WAIT_TIMED_OUT = {"~ultimate.waitTimedOut": True}
"""Stored for a wait that timed out, so a replay returns ``None`` again."""
EVENT_BACKSTOP = timedelta(minutes=15)
"""A parked wait is re-claimed at least this often (wakes normally come first)."""


class StepSuspension(BaseException):
    """Stops the body so the worker can park the job until ``resume_at``.

    A ``BaseException``: an ``except Exception`` in the body must not
    swallow it. Never logged as an error; never spends an attempt.
    """

    def __init__(self, step: str, resume_at: datetime, reason: str) -> None:
        super().__init__(
            f"step {step!r} suspends the job until {resume_at.isoformat()}"
        )
        self.step = step
        self.resume_at = resume_at
        self.reason = reason


def _refuse_atomic_without_the_feature(name: str) -> None:
    """Refuse an atomic step the driver cannot make atomic.

    ``features.atomic_steps`` False on a store other processes share (the
    Redis driver): the step's record would be written after the caller's
    transaction commits, so a crash between the two would run its writes
    again. The memory driver is let through: its rows die with the process,
    so nothing ever replays the step.
    """
    from .drivers import get_driver

    features = get_driver().features
    if not features.atomic_steps and features.shared_across_processes:
        raise StepAtomicUnsupported(
            f"step {name!r} asks for atomic=True, but the {get_driver().name} driver "
            "cannot record a step in your database's transaction: its writes could "
            "run twice after a crash between the commit and the step's record",
            meta={"step": name, "driver": get_driver().name},
        )


class StepApi:
    """``ctx.step``: the durable steps of one attempt."""

    def __init__(
        self,
        *,
        run_id: Any,
        store: StepStore,
        events: EventStore | None,
        fence: StepFence,
        token: CancellationToken,
        now: Callable[[], datetime],
        step_timeout_ms: int | None,
        using: str,
    ) -> None:
        self._run_id = run_id
        self._store = store
        self._events = events
        self._fence = fence
        self._token = token
        self._now = now
        self._step_timeout_ms = step_timeout_ms
        self._using = using
        self._records: dict[str, StepRecord] | None = None
        self._used: set[str] = set()
        self.replayed: list[str] = []
        """Names served from storage in this attempt (tests and tracing)."""

    # -- run -------------------------------------------------------------------

    def run(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        atomic: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once per run; replays return its stored output.

        The output is stored as JSON and what is returned is that JSON form,
        on the first run and on every replay alike.

        Args:
            name: the replay key, unique within the run.
            fn: the step's work.
            atomic: run ``fn`` inside ``transaction.atomic()`` and record the
                step in the same transaction: its database writes happen
                exactly once.

        Raises:
            StepDuplicate: the name was already used in this run.
            StepOutputUnserializable: the output cannot be stored as JSON.
            JobLeaseLost: this attempt lost the job; nothing was recorded.
            Aborted: the attempt was cancelled before the step could start.
            StepAtomicUnsupported: ``atomic=True`` on a driver that cannot
                record a step in the caller's transaction (before ``fn`` runs).
        """
        if not tracing.enabled():
            return self._run(name, fn, args, kwargs, atomic)
        with tracing.step(name, self._run_id) as span:
            replays = len(self.replayed)
            output = self._run(name, fn, args, kwargs, atomic)
            if len(self.replayed) > replays:
                span.replayed()
            return output

    def _run(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        atomic: bool,
    ) -> Any:
        if atomic:
            _refuse_atomic_without_the_feature(name)
        record = self._claim_name(name)
        if record is not None and record.status == "completed":
            self.replayed.append(name)
            return record.output
        if self._token.is_set():
            raise Aborted(f"step {name!r} refused: the attempt was cancelled")
        started = record.started_at if record is not None else self._now()
        try:
            if atomic:
                with transaction.atomic(using=self._using):
                    output = self._call(name, fn, args, kwargs)
                    self._complete(name, started, output)
            else:
                output = self._call(name, fn, args, kwargs)
                self._complete(name, started, output)
        except StepSuspension:
            raise
        except BaseException as error:
            self._record_failure(name, started, error)
            raise
        fault_point(AFTER_STEP_COMMIT)
        assert self._records is not None
        return self._records[name].output

    # -- sleep -----------------------------------------------------------------

    def sleep(self, name: str, duration: DurationInput) -> None:
        """Suspend the job for ``duration`` (no slot held, no attempt spent)."""
        delay = parse_duration_ms(duration, what="sleep duration", allow_zero=True)
        record = self._claim_name(name)
        if record is not None and record.status == "completed":
            self.replayed.append(name)
            return
        wake_at = (
            record.wake_at
            if record is not None and record.wake_at is not None
            else self._now() + timedelta(milliseconds=delay)
        )
        self._sleep(name, record, wake_at)

    def sleep_until(self, name: str, when: datetime) -> None:
        """Suspend the job until ``when`` (an aware datetime).

        Raises:
            DurationInvalid: ``when`` is not an aware datetime, or is further
                away than a ``sleep()`` may last (36500d).
        """
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise DurationInvalid(
                f"sleep_until({name!r:.80}) needs a timezone-aware datetime, "
                f"got {when!r:.80}",
                fix="pass datetime(..., tzinfo=UTC) or timezone.now() + timedelta(...)",
            )
        # The same ceiling as sleep(): a wake-up centuries away is a bug in
        # the caller's arithmetic, not a schedule.
        if when - self._now() > MAX_DURATION:
            raise DurationInvalid(
                f"sleep_until({name!r:.80}) is more than {MAX_DURATION_TEXT} away",
                fix="wake the job sooner, or re-arm a shorter sleep in a loop",
            )
        record = self._claim_name(name)
        if record is not None and record.status == "completed":
            self.replayed.append(name)
            return
        self._sleep(name, record, when)

    def _sleep(self, name: str, record: StepRecord | None, wake_at: datetime) -> None:
        now = self._now()
        started = record.started_at if record is not None else now
        if wake_at <= now:
            self._put(name, "completed", started, completed_at=now, wake_at=wake_at)
            return
        if record is None or record.status != "sleeping":
            self._put(name, "sleeping", started, wake_at=wake_at)
        raise StepSuspension(name, wake_at, "sleep")

    # -- wait_for_event ----------------------------------------------------------

    def wait_for_event(
        self,
        name: str,
        event: str,
        key: str | None = None,
        timeout: DurationInput = "24h",
        schema: Any = None,
        required: bool = False,
    ) -> Any:
        """Wait for ``event`` (with ``key``, if given); return its payload.

        Every event committed after the wait began belongs to it, whatever
        its stamp; one committed before does not. Returns ``None`` when
        ``timeout`` passes (``required=True`` raises ``X_JOB_TIMEOUT``).

        Raises:
            JobEventInvalid: ``schema`` refused the matched payload (the
                next search, after a retry, starts past that event).
            JobInputInvalid: ``event`` or ``key`` is one ``publish_event``
                would refuse.
        """
        if self._events is None:
            raise JobsError("this driver has no event store", code="X_NOT_IMPLEMENTED")
        check_event_names(event, key)
        limit = parse_duration_ms(timeout, what="wait timeout")
        record = self._claim_name(name)
        if record is not None and record.status == "completed":
            self.replayed.append(name)
            if record.output == WAIT_TIMED_OUT:
                return None
            self._check_payload(name, schema, record.output)
            return record.output
        if record is None or record.status != "waiting":
            mark = self._events.mark()
            record = self._put(
                name,
                "waiting",
                mark.at,
                wake_at=mark.at + timedelta(milliseconds=limit),
                event=event,
                correlation_key=key,
                snapshot=mark.snapshot,
            )
        hit = self._events.find(record)
        now = self._now()
        if hit is not None:
            try:
                self._check_payload(name, schema, hit.payload)
            except JobEventInvalid:
                # Move past the refused event, so it hides no later one.
                self._put_record(record, cursor_at=hit.published_at, cursor_id=hit.id)
                raise
            # The event it took stays on the step: the events page lists
            # each event's matched waits from it.
            self._put(
                name,
                "completed",
                record.started_at,
                completed_at=now,
                output=hit.payload,
                event=event,
                correlation_key=key,
                cursor_at=hit.published_at,
                cursor_id=hit.id,
            )
            return hit.payload
        assert record.wake_at is not None
        if now >= record.wake_at:
            if required:
                raise JobTimeout(f"no {event!r} event arrived within the wait {name!r}")
            logger.info("jobs.step.wait-timeout", extra={"step": name, "event": event})
            self._put(
                name,
                "completed",
                record.started_at,
                completed_at=now,
                output=WAIT_TIMED_OUT,
            )
            return None
        raise StepSuspension(name, min(record.wake_at, now + EVENT_BACKSTOP), "event")

    # -- plumbing --------------------------------------------------------------

    def _claim_name(self, name: str) -> StepRecord | None:
        problem = text_problem(name, max_bytes=MAX_KEY_BYTES)
        if problem is not None:
            # Stored in a unique index with the run id: refused before any
            # write, and terminal (a replay would meet the same name).
            raise StepNameInvalid(f"a step name {problem}")
        if name in self._used:
            raise StepDuplicate(
                f"the step name {name!r} is used twice in one run", meta={"step": name}
            )
        self._used.add(name)
        if self._records is None:
            # One read per attempt; kept in step with this attempt's own
            # writes after that (only the holding attempt can write).
            self._records = self._store.list(self._run_id)
        return self._records.get(name)

    def _call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if self._step_timeout_ms is None:
            return fn(*args, **kwargs)
        # Cancel first (the body and later writes see the token), then fail.
        reason = JobTimeout(
            f"step {name!r} passed its step_timeout of {self._step_timeout_ms} ms"
        )
        timer = threading.Timer(
            self._step_timeout_ms / 1000, self._token.cancel, args=(reason,)
        )
        timer.daemon = True
        started = time.monotonic()
        timer.start()
        try:
            output = fn(*args, **kwargs)
        finally:
            timer.cancel()
        if (time.monotonic() - started) * 1000 >= self._step_timeout_ms:
            raise reason
        return output

    def _complete(self, name: str, started: datetime, output: Any) -> None:
        if self._token.is_set():
            raise Aborted(f"step {name!r} finished after the attempt was cancelled")
        try:
            # Checked before the write: a value jsonb refuses (a NUL, a lone
            # surrogate) would otherwise fail the insert and be retried,
            # running the step's side effect again each time.
            stored = json.loads(json_text(output, exact=False))
        except JsonRefused as refused:
            raise StepOutputUnserializable(
                f"step {name!r} returned a value that {refused.reason}",
                meta={"step": name},
            ) from None
        self._put(name, "completed", started, completed_at=self._now(), output=stored)

    def _record_failure(
        self, name: str, started: datetime, error: BaseException
    ) -> None:
        if self._token.is_set() or (
            isinstance(error, JobsError)
            and error.code
            in (
                "X_JOB_LEASE_LOST",
                "X_STEP_DUPLICATE",
            )
        ):
            return  # a cancelled or fenced-out attempt writes nothing
        try:
            text = storable_text(f"{type(error).__name__}: {error}"[:2000])
            self._put(name, "failed", started, error=text)
        except Exception:
            logger.warning("jobs.step.failure-unrecorded", extra={"step": name})

    def _check_payload(self, name: str, schema: Any, payload: Any) -> None:
        if schema is None:
            return
        issues = schema_issues(schema, payload)
        if issues is not None:
            raise JobEventInvalid(
                f"the event matched by wait {name!r} is refused by its schema ({issues})",
                meta={"step": name, "issues": issues},
            )

    def _put(
        self, name: str, status: str, started: datetime, **fields: Any
    ) -> StepRecord:
        from .drivers.steps import StepRecord

        record = StepRecord(
            run_id=self._run_id, name=name, status=status, started_at=started, **fields
        )
        return self._put_record(record)

    def _put_record(self, record: StepRecord, **changes: Any) -> StepRecord:
        from dataclasses import replace

        if changes:
            record = replace(record, **changes)
        if self._token.is_set() and record.status != "failed":
            raise Aborted(
                f"step {record.name!r} written after the attempt was cancelled"
            )
        self._store.put(record, self._fence)
        assert self._records is not None
        self._records[record.name] = record
        return record
