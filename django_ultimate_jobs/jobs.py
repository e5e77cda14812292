"""``@job(...)``: declare durable work; the handle enqueues it.

The handle is the only surface app code touches: ``enqueue``, ``using``,
``enqueue_many``, ``describe``. A body never runs inline: the worker's
executor is the single execution path (tests included, through
``django_ultimate_jobs.testing.run_jobs``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, Never, TypeVar
from urllib.parse import quote

from .drivers.base import DEFAULT_QUEUE, Enqueued, EnqueueRequest
from .durations import (
    MAX_DURATION,
    MAX_DURATION_TEXT,
    DurationInput,
    parse_duration_ms,
)
from .errors import (
    DurationInvalid,
    JobDeclarationInvalid,
    JobDuplicate,
    JobInputInvalid,
    JobOptionUnknown,
    JobsError,
)
from .outbox.staging import submit
from .registry import register
from .retry import Retry, retry_schedule_ms
from .signals import job_enqueued
from .validation import (
    MAX_KEY_BYTES,
    NAME_RULE,
    InputShape,
    check_schema,
    check_schema_declared,
    dump_input,
    input_shape,
    name_problem,
    text_problem,
)

__all__ = ["Concurrency", "EnqueueOptions", "Enqueued", "JobHandle", "job"]

R = TypeVar("R")
MAX_CONCURRENCY_KEY_LENGTH = 200
"""The longest key a ``Concurrency(key=...)`` function may answer."""
PRIORITY_RANGE = range(-100, 101)


MAX_CONCURRENCY = 1_000_000
"""The largest ``concurrency=`` limit (a larger one is refused at declaration)."""


@dataclass(frozen=True, slots=True)
class Concurrency:
    """A fleet-wide cap on running jobs of one name, optionally per key.

    Enforced fleet-wide with leases: a run holds one of ``limit`` slots of
    its key while it runs (see docs/howto/concurrency.md). A job waiting for
    a slot is not claimed and spends no attempt.

    Args:
        limit: how many may run at once (per key when ``key`` is given),
            from 1 to :data:`MAX_CONCURRENCY` (1,000,000).
        key: ``input -> str`` naming the bucket (e.g. one per account): a
            non-blank string of at most 200 characters, checked at enqueue.
        when_busy: ``"wait"`` (retry later, no attempt spent) or ``"fail"``
            (settle the job ``failed``).
    """

    limit: int
    key: Callable[[Mapping[str, Any]], str] | None = None
    when_busy: Literal["wait", "fail"] = "wait"


class JobHandle(Generic[R]):
    """A declared job. Built by :func:`job`; enqueue it, never call it."""

    def __init__(
        self,
        func: Callable[..., R],
        *,
        name: str,
        queue: str | Callable[[], str],
        retry: Retry,
        timeout_ms: int | None,
        step_timeout_ms: int | None,
        idempotency_key: Callable[[Mapping[str, Any]], str] | None,
        tenant: Callable[[Mapping[str, Any]], str] | None,
        concurrency: Concurrency | None,
        priority: int,
        input_schema: Any,
        on_settled: Callable[..., Any] | None,
        shape: InputShape,
    ) -> None:
        self.func = func
        self.name = name
        self._queue = queue
        self.retry = retry
        self.timeout_ms = timeout_ms
        self.step_timeout_ms = step_timeout_ms
        self.idempotency_key = idempotency_key
        self.tenant = tenant
        self.concurrency = concurrency
        self.priority = priority
        self.input_schema = input_schema
        self.on_settled = on_settled
        self.shape = shape
        self.is_async = inspect.iscoroutinefunction(func)
        self.origin = f"{func.__module__}.{func.__qualname__}"
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<JobHandle {self.name} queue={self.queue}>"

    @property
    def queue(self) -> str:
        """The queue its runs go to (``using(queue=...)`` overrides it per call).

        A queue declared as a function is asked at each use, so it can follow
        a setting (the built-in jobs' ``HOUSEKEEPING_QUEUE``).

        Raises:
            JobDeclarationInvalid: the function answered no valid queue name.
        """
        if not callable(self._queue):
            return self._queue
        name = self._queue()
        _check_name(
            "queue",
            name,
            lambda cause: JobDeclarationInvalid(
                f"the queue= function of {self.name} answered {name!r}: {cause}",
                meta={"job": self.name},
            ),
        )
        return name

    # -- enqueue -------------------------------------------------------------

    def enqueue(self, **input: Any) -> Enqueued:
        """Enqueue one run with default options.

        Inside ``transaction.atomic()`` the row commits or rolls back with
        the caller's transaction (through the outbox when the jobs live in
        another database).

        Raises:
            OutboxNoTransaction: ``OUTBOX = "required"`` outside a transaction.
            JobInputInvalid: the input was refused; nothing was written.
            JobDuplicate: only with ``using(on_conflict="error")``.
        """
        return _DEFAULT_OPTIONS.bind(self).enqueue(**input)

    def enqueue_many(self, inputs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Enqueue many runs in one round trip; every input is checked first."""
        return _DEFAULT_OPTIONS.bind(self).enqueue_many(inputs)

    def using(
        self,
        *,
        run_at: datetime | None = None,
        delay: DurationInput | None = None,
        queue: str | None = None,
        priority: int | None = None,
        tenant_id: str | None = None,
        actor: Any = None,
        on_conflict: Literal["dedupe", "error"] = "dedupe",
        idempotency_key: str | None = None,
        outbox: bool | None = None,
        **unknown: Never,
    ) -> BoundEnqueue:
        """Return an enqueuer with per-call options.

        Args:
            run_at: an aware datetime to run at (or after), at most 36500
                days (100 years) from now.
            delay: run this long from now (the database clock decides), at
                most ``"36500d"`` (100 years).
            queue: override the declared queue.
            priority: -100..100; higher runs sooner among due jobs.
            tenant_id: the enqueuer's tenant (idempotency namespace).
            actor: recorded as ``enqueued_by`` (attribution, never authority):
                a user (its pk) or a string.
            on_conflict: ``"dedupe"`` answers the live holder of the key;
                ``"error"`` raises ``X_JOB_DUPLICATE``.
            idempotency_key: a key for this call (wins over the declared one).
            outbox: ``True`` stages this enqueue in the outbox (published as
                the job after the caller's commit) even when the outbox is
                off; ``False`` inserts directly even when it is ``True``
                (under ``OUTBOX = "required"`` it counts as no transaction
                and is refused with ``X_OUTBOX_NO_TX``);
                ``None`` follows ``ULTIMATE_JOBS["OUTBOX"]``.

        Raises:
            JobInputInvalid: an option is invalid or unknown (nothing
                written); an unknown one is also a ``TypeError``.
        """
        if unknown:
            raise _unknown_options(unknown)
        options = EnqueueOptions.build(
            run_at=run_at,
            delay=delay,
            queue=queue,
            priority=priority,
            tenant_id=tenant_id,
            actor=actor,
            on_conflict=on_conflict,
            idempotency_key=idempotency_key,
            outbox=outbox,
        )
        return options.bind(self)

    # -- used by the worker and the operator ---------------------------------

    def check_input(self, given: Mapping[str, Any]) -> str:
        """Validate ``given`` and return its JSON text (the enqueue checks)."""
        # A plain dict first: the ABC check costs a microsecond per input.
        if type(given) is not dict and not isinstance(given, Mapping):
            raise JobInputInvalid(
                f"{self.name} input must be a dict of keyword arguments, "
                f"not {type(given).__name__}",
                fix="pass each input as a dict, e.g. {'invoice_id': 1}",
                meta={"job": self.name},
            )
        self.shape.check(self.name, given)
        text = dump_input(self.name, given)
        check_schema(self.name, self.input_schema, given)
        return text

    def idempotency_key_for(self, given: Mapping[str, Any]) -> str | None:
        """Derive the declared idempotency key, refusing an empty one."""
        if self.idempotency_key is None:
            return None
        key = _call_deriver(self.name, "idempotency_key", self.idempotency_key, given)
        return _checked_text(self.name, "idempotency_key", key)

    def tenant_for(self, given: Mapping[str, Any]) -> str | None:
        """Derive the declared tenant (``None`` for a tenantless job)."""
        if self.tenant is None:
            return None
        value = _call_deriver(self.name, "tenant", self.tenant, given)
        return _checked_text(self.name, "tenant", None if value is None else str(value))

    def concurrency_for(
        self, given: Mapping[str, Any]
    ) -> tuple[str | None, int | None]:
        """The lease key and slot count of a run with this input (uncapped: ``None``).

        ``job:<name>`` for a plain cap; ``job-key:<URI-encoded name>:<key>``
        for a keyed one (the distinct prefix and the encoding keep job ``a``
        keyed ``b:c`` apart from job ``a:b`` keyed ``c``).

        Raises:
            JobDeclarationInvalid: the key function raised or answered no
                non-blank string of at most 200 characters (the message never
                holds the key itself: it may be personal data).
        """
        cap = self.concurrency
        if cap is None:
            return None, None
        if cap.key is None:
            return f"job:{self.name}", cap.limit
        try:
            key = cap.key(given)
        except Exception as error:
            raise JobDeclarationInvalid(
                f"Concurrency(key=...) of {self.name} raised {type(error).__name__} "
                "for this input",
                fix="make the key function answer a string for every valid input",
                meta={"job": self.name},
            ) from None
        defect = _key_defect(key)
        if defect is not None:
            raise JobDeclarationInvalid(
                f"Concurrency(key=...) of {self.name} answered {defect}",
                fix=f"answer a non-blank string of at most {MAX_CONCURRENCY_KEY_LENGTH} "
                "characters",
                meta={"job": self.name},
            )
        return f"job-key:{quote(self.name, safe='')}:{key}", cap.limit

    def retry_policy(self, given: Mapping[str, Any]) -> Retry:
        """The retry policy for a run with this input (the declared one).

        Handles that carry per-run policies (the ``django.tasks`` backend's)
        override it; the attempt budget always comes from the stored row.
        """
        return self.retry

    def timeout_for(self, given: Mapping[str, Any]) -> int | None:
        """The attempt timeout (ms) for a run with this input (the declared one)."""
        return self.timeout_ms

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description (for ``jobs show`` and manifests)."""
        return {
            "name": self.name,
            "queue": self.queue,
            "priority": self.priority,
            "retry": {
                "attempts": self.retry.attempts,
                "backoff": self.retry.backoff,
                "dead_letter": self.retry.dead_letter,
            },
            "retry_delays_ms": retry_schedule_ms(self.retry),
            "timeout_ms": self.timeout_ms,
            "step_timeout_ms": self.step_timeout_ms,
            "concurrency": None
            if self.concurrency is None
            else {
                "limit": self.concurrency.limit,
                "when_busy": self.concurrency.when_busy,
            },
            "on_settled": self.on_settled is not None,
            "async": self.is_async,
        }


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Validated per-call options (built by :meth:`JobHandle.using`)."""

    run_at: datetime | None = None
    delay_ms: int = 0
    queue: str | None = None
    priority: int | None = None
    tenant_id: str | None = None
    enqueued_by: str | None = None
    on_conflict: Literal["dedupe", "error"] = "dedupe"
    idempotency_key: str | None = None
    outbox: bool | None = None

    @classmethod
    def build(
        cls,
        *,
        run_at: datetime | None,
        delay: DurationInput | None,
        queue: str | None,
        priority: int | None,
        tenant_id: str | None,
        actor: Any,
        on_conflict: str,
        idempotency_key: str | None,
        outbox: bool | None,
    ) -> EnqueueOptions:
        """Validate options; refuse, never clamp."""
        if run_at is not None and delay is not None:
            raise _option_error("pass run_at or delay, not both")
        if run_at is not None:
            _check_run_at(run_at)
        delay_ms = 0
        if delay is not None:
            try:
                delay_ms = parse_duration_ms(delay, what="delay", allow_zero=True)
            except DurationInvalid as error:
                raise _option_error(error.cause, fix=error.fix) from None
        if queue is not None:
            _check_name(
                "queue",
                queue,
                lambda cause: _option_error(
                    cause, fix=f"pass a queue name: {NAME_RULE}"
                ),
            )
        if priority is not None:
            _check_priority(priority, _option_error)
        if on_conflict not in ("dedupe", "error"):
            raise _option_error("on_conflict must be 'dedupe' or 'error'")
        if tenant_id is not None:
            tenant_id = _checked_text("enqueue", "tenant_id", tenant_id)
        if idempotency_key is not None:
            idempotency_key = _checked_text(
                "enqueue", "idempotency_key", idempotency_key
            )
        if outbox is not None and not isinstance(outbox, bool):
            raise _option_error("outbox must be True, False or None")
        return cls(
            run_at=run_at,
            delay_ms=delay_ms,
            queue=queue,
            priority=priority,
            tenant_id=tenant_id,
            enqueued_by=_actor_id(actor),
            on_conflict=on_conflict,  # type: ignore[arg-type]
            idempotency_key=idempotency_key,
            outbox=outbox,
        )

    def bind(self, handle: JobHandle[Any]) -> BoundEnqueue:
        """Return an enqueuer of ``handle`` with these options."""
        return BoundEnqueue(handle, self)


_DEFAULT_OPTIONS = EnqueueOptions()


class BoundEnqueue:
    """A job handle with per-call options: ``handle.using(...).enqueue(...)``."""

    __slots__ = ("handle", "options")

    def __init__(self, handle: JobHandle[Any], options: EnqueueOptions) -> None:
        self.handle = handle
        self.options = options

    def request(self, given: Mapping[str, Any]) -> EnqueueRequest:
        """Validate ``given`` and build the driver request (nothing written)."""
        handle, options = self.handle, self.options
        text = handle.check_input(given)
        concurrency_key, concurrency_limit = handle.concurrency_for(given)
        return EnqueueRequest(
            name=handle.name,
            input=given,
            input_json=text,
            queue=options.queue or handle.queue,
            idempotency_key=options.idempotency_key
            or handle.idempotency_key_for(given),
            max_attempts=handle.retry.attempts,
            priority=handle.priority if options.priority is None else options.priority,
            run_at=options.run_at,
            delay_ms=options.delay_ms,
            tenant_id=options.tenant_id or handle.tenant_for(given),
            on_conflict=options.on_conflict,
            enqueued_by=options.enqueued_by,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
        )

    def enqueue(self, **input: Any) -> Enqueued:
        """Validate and enqueue one run; see :meth:`JobHandle.enqueue`."""
        request = self.request(input)
        # Directly, or staged in the caller's transaction (the outbox).
        (answer,) = submit([request], self.options.outbox)
        if job_enqueued.receivers:
            job_enqueued.send_robust(sender=JobHandle, job=self.handle, enqueued=answer)
        return answer

    def enqueue_many(self, inputs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Validate every input, then enqueue all in one round trip.

        Raises:
            JobInputInvalid: an input was refused (``meta["index"]`` says
                which, counting from 0); nothing was written.
            JobDuplicate: with ``on_conflict="error"``, a live job holds an
                item's key, or two items of the batch share one
                (``meta["index"]`` and ``meta["first"]``); nothing was written.
        """
        if isinstance(inputs, Mapping | str | bytes) or not isinstance(
            inputs, Iterable
        ):
            raise JobInputInvalid(
                f"enqueue_many() takes a list of input dicts, not {type(inputs).__name__}",
                fix="pass a list of dicts, e.g. [{'invoice_id': 1}, {'invoice_id': 2}]",
                meta={"job": self.handle.name},
            )
        requests = []
        for index, given in enumerate(inputs):
            try:
                requests.append(self.request(given))
            except JobInputInvalid as error:
                raise JobInputInvalid(
                    f"item {index} of the batch: {error.cause}",
                    fix=error.fix,
                    meta={**error.meta, "index": index},
                ) from error.__cause__
        if self.options.on_conflict == "error":
            _refuse_repeated_keys(self.handle.name, requests)
        answers = submit(requests, self.options.outbox, many=True)
        if job_enqueued.receivers:
            for answer in answers:
                job_enqueued.send_robust(
                    sender=JobHandle, job=self.handle, enqueued=answer
                )
        return answers


def _refuse_repeated_keys(name: str, requests: list[EnqueueRequest]) -> None:
    """Under ``on_conflict="error"``, two items of one batch with one key:
    the second would meet the first (a row of this very batch, never
    committed) as its holder. Refused before anything is written."""
    first: dict[tuple[str, str], int] = {}
    for index, request in enumerate(requests):
        if request.idempotency_key is None:
            continue
        key = (request.tenant_id or "", request.idempotency_key)
        if key in first:
            raise JobDuplicate(
                f"items {first[key]} and {index} of the batch share the "
                f"idempotency key {request.idempotency_key!r:.80}",
                fix="give each item its own key, or enqueue with "
                'on_conflict="dedupe" (the default) to keep one run per key',
                meta={"job": name, "index": index, "first": first[key]},
            )
        first[key] = index


def job(
    func: Callable[..., R] | None = None,
    *,
    name: str | None = None,
    queue: str | Callable[[], str] = DEFAULT_QUEUE,
    retry: Retry | None = None,
    timeout: DurationInput | None = None,
    step_timeout: DurationInput | None = None,
    idempotency_key: Callable[[Mapping[str, Any]], str] | None = None,
    tenant: Callable[[Mapping[str, Any]], str] | None = None,
    concurrency: int | Concurrency | None = None,
    priority: int = 0,
    input_schema: Any = None,
    on_settled: Callable[..., Any] | None = None,
) -> Any:
    """Declare a job. Use as ``@job`` or ``@job(name=..., ...)``.

    Args:
        name: the durable name (default ``"<module>.<qualname>"``); pin it
            so renaming the function does not orphan queued rows.
        queue: the queue workers claim it from, or a function answering it,
            asked at each enqueue (a reusable app's own setting, say).
        retry: the :class:`Retry` policy (default 3 attempts, exponential).
        timeout: a whole-attempt deadline (cancel first, then fail).
        step_timeout: a ceiling for one durable step.
        idempotency_key: ``input -> str``; one LIVE job per key.
        tenant: ``input -> str``; the tenant the run belongs to.
        concurrency: an int (fleet-wide cap) or a :class:`Concurrency`.
        priority: -100..100; higher runs sooner among due jobs.
        input_schema: a pydantic model, dataclass or callable validating
            the input at enqueue and again at every claim.
        on_settled: called once after the run ends (completed, dead-lettered,
            dropped, refused) by the worker whose settle landed.

    Raises:
        JobDeclarationInvalid: at import, listing every problem at once.
        JobDuplicate: another declaration holds the name.
    """

    def declare(function: Callable[..., R]) -> JobHandle[R]:
        job_name = (
            name
            if name is not None
            else f"{function.__module__}.{function.__qualname__}"
        )
        problems: list[str] = []

        def refuse(message: str) -> JobsError:
            problems.append(message)
            return JobDeclarationInvalid(message)

        _collect(problems, lambda: _check_name("name", job_name, refuse))
        if not callable(queue):
            _collect(problems, lambda: _check_name("queue", queue, refuse))
        _collect(problems, lambda: _check_priority(priority, refuse))
        policy = retry if retry is not None else Retry()
        if not isinstance(policy, Retry):
            problems.append("retry must be a Retry(...)")
        timeout_ms = _collect(problems, lambda: _ceiling("timeout", timeout))
        step_timeout_ms = _collect(
            problems, lambda: _ceiling("step_timeout", step_timeout)
        )
        for option, value in (
            ("idempotency_key", idempotency_key),
            ("tenant", tenant),
            ("on_settled", on_settled),
        ):
            if value is not None and not callable(value):
                problems.append(f"{option} must be a callable or None")
        cap = _collect(problems, lambda: _concurrency(concurrency))
        shape = _collect(problems, lambda: input_shape(function, job_name))
        _collect(problems, lambda: check_schema_declared(job_name, input_schema))
        if problems:
            raise JobDeclarationInvalid(
                f"@job {job_name!r} is invalid: " + "; ".join(dict.fromkeys(problems)),
                meta={"job": job_name, "problems": problems},
            )
        handle: JobHandle[R] = JobHandle(
            function,
            name=job_name,
            queue=queue,
            retry=policy,
            timeout_ms=timeout_ms,
            step_timeout_ms=step_timeout_ms,
            idempotency_key=idempotency_key,
            tenant=tenant,
            concurrency=cap,
            priority=priority,
            input_schema=input_schema,
            on_settled=on_settled,
            shape=shape,
        )
        register(handle)
        return handle

    return declare(func) if func is not None else declare


# -- checks -------------------------------------------------------------------

T = TypeVar("T")


def _collect(problems: list[str], check: Callable[[], T]) -> T:
    try:
        return check()
    except JobsError as error:
        if error.cause not in problems:
            problems.append(error.cause)
        return None  # type: ignore[return-value]


def _option_error(
    message: str,
    fix: str = "correct the using(...) options",
    meta: Mapping[str, Any] | None = None,
) -> JobsError:
    return JobInputInvalid(message, fix=fix, meta=meta)


def _unknown_options(unknown: Mapping[str, Any]) -> JobsError:
    names = ", ".join(repr(name) for name in sorted(unknown))
    parameters = inspect.signature(JobHandle.using).parameters
    known = ", ".join(p for p in parameters if p not in ("self", "unknown"))
    return JobOptionUnknown(
        f"unknown option {names}; options are {known}",
        fix=f"pass only options using() takes: {known}",
        meta={"unknown": sorted(unknown)},
    )


def _check_run_at(run_at: Any) -> None:
    if not isinstance(run_at, datetime) or run_at.utcoffset() is None:
        raise _option_error(
            "run_at must be a timezone-aware datetime",
            fix="pass e.g. timezone.now() + timedelta(hours=1), or delay='1h'",
        )
    # The wall clock, not the database's: a bound, not a schedule.
    if run_at - datetime.now(UTC) > MAX_DURATION:
        raise _option_error(
            f"run_at must be at most {MAX_DURATION_TEXT} from now",
            fix="pass a run_at within 36500 days of now",
            meta={"run_at": run_at.isoformat()},
        )


def _check_name(what: str, value: Any, error: Callable[[str], JobsError]) -> None:
    problem = name_problem(value)
    if problem is not None:
        raise error(f"{what} {problem}")


def _check_priority(value: Any, error: Callable[[str], JobsError]) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value not in PRIORITY_RANGE
    ):
        raise error(f"priority must be a whole number from -100 to 100, got {value!r}")


def _ceiling(what: str, value: DurationInput | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration_ms(value, what=what)
    except DurationInvalid as error:
        raise JobDeclarationInvalid(error.cause) from None


def _concurrency(value: int | Concurrency | None) -> Concurrency | None:
    if value is None:
        return None
    cap = value if isinstance(value, Concurrency) else Concurrency(limit=value)  # type: ignore[arg-type]
    limit = cap.limit
    # An int, as documented: 2.0 and True are slips, not counts.
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise JobDeclarationInvalid(
            "concurrency must be a whole number of at least 1 (an int), "
            f"got {limit!r:.40}"
        )
    if limit > MAX_CONCURRENCY:
        # The row stores the limit in an integer column: a larger one passed
        # declaration and failed the enqueue with a raw DataError that
        # aborted the caller's transaction.
        raise JobDeclarationInvalid(
            f"concurrency must be at most {MAX_CONCURRENCY:_}, got {limit!r:.40}"
        )
    if cap.key is not None and not callable(cap.key):
        raise JobDeclarationInvalid("Concurrency(key=...) must be a callable")
    if cap.when_busy not in ("wait", "fail"):
        raise JobDeclarationInvalid(
            f"Concurrency(when_busy=...) must be 'wait' or 'fail', not {cap.when_busy!r}"
        )
    return cap


def _key_defect(key: Any) -> str | None:
    # What is wrong with a concurrency key, never the key itself.
    if not isinstance(key, str):
        return f"a {type(key).__name__}, not a string"
    if not key:
        return "an empty string"
    if not key.strip():
        # As lock(" ") is refused: a key of spaces is a missing value.
        return "a blank string (only whitespace)"
    if len(key) > MAX_CONCURRENCY_KEY_LENGTH:
        return (
            f"a string of {len(key)} characters (at most {MAX_CONCURRENCY_KEY_LENGTH})"
        )
    if "\x00" in key:
        return "a string holding a NUL character"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "a string that is not valid UTF-8 (a lone surrogate)"
    return None


def _call_deriver(
    job_name: str,
    what: str,
    deriver: Callable[[Mapping[str, Any]], Any],
    given: Mapping[str, Any],
) -> Any:
    try:
        return deriver(given)
    except Exception as error:
        raise JobInputInvalid(
            f"{what}= of {job_name} raised {type(error).__name__} for this input",
            meta={"job": job_name},
        ) from error


def _checked_text(job_name: str, what: str, value: Any) -> str:
    problem = text_problem(value, max_bytes=MAX_KEY_BYTES)
    if problem is not None:
        raise JobInputInvalid(
            f"{what} of {job_name} {problem}",
            fix=f"pass a non-empty string of at most {MAX_KEY_BYTES} UTF-8 bytes",
            meta={"job": job_name},
        )
    assert isinstance(value, str)  # text_problem() refuses anything else
    return value


def _actor_id(actor: Any) -> str | None:
    if actor is None:
        return None
    if isinstance(actor, str):
        return _checked_text("enqueue", "actor", actor)
    pk = getattr(actor, "pk", None)
    if pk is None:
        raise _option_error(
            "actor must be a saved user (or any object with pk) or a string"
        )
    # __class__, not type(): request.user is a lazy wrapper that passes
    # __class__ through to the real user.
    return f"{actor.__class__.__name__.lower()}:{pk}"
