"""Coded errors: one base class, stable ``X_...`` codes, retry classes.

Every error this app raises is a :class:`JobsError` carrying ``code`` (a
stable upper-snake string), ``cause`` (what happened, never a secret or an
application value), ``fix`` (one runnable command or edit) and optional
``meta``. Across a process boundary only the code survives, so code that
reacts to errors matches on ``code``, never on the class or the message.

Each code is registered once with its retry class (see
``docs/reference/errors.md``); the worker's classifier reads that table.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "ErrorCodeDuplicate",
    "JobsError",
    "RateLimited",
    "RetryAfter",
    "RetryClass",
    "Terminal",
    "code_of",
    "interrupts_the_process",
    "register_error_code",
    "register_error_retry",
    "registered_codes",
    "retry_class_of",
]


class RetryClass(StrEnum):
    """How the worker treats an attempt that failed with a given code."""

    TERMINAL = "terminal"
    """Dead-letter now; the remaining attempts are not spent."""
    RETRY_AFTER = "retry-after"
    """Retry after the delay the error states (``meta["retry_after_seconds"]``)."""
    RETRYABLE = "retryable"
    """Retry on the backoff schedule."""
    UNCLASSIFIED = "unclassified"
    """Treated like retryable: the attempt count decides."""
    NOT_IN_JOB = "not-in-job"
    """Never raised inside a job body (declaration, enqueue or operator refusal)."""


_REGISTRY: dict[str, RetryClass] = {}


def register_error_code(code: str, retry: RetryClass | str) -> None:
    """Register ``code`` with its retry class, once.

    Raises:
        ErrorCodeDuplicate: the code is already registered with another class.
    """
    klass = RetryClass(retry)
    if not code.startswith("X_") or not code.replace("_", "").isalnum():
        raise ValueError(f"error codes look like X_UPPER_SNAKE, not {code!r}")
    existing = _REGISTRY.get(code)
    if existing is not None and existing is not klass:
        raise ErrorCodeDuplicate(
            f"the error code {code} is already registered as {existing.value}",
            fix="choose another code, or call register_error_retry() to reclassify",
            meta={"code": code},
        )
    _REGISTRY[code] = klass


class JobsError(Exception):
    """The base of every error this app raises.

    Subclasses set ``code``, ``retry_class`` and usually ``default_fix``;
    defining a subclass with its own ``code`` registers that code (a second
    class claiming the same code with another retry class is refused). An
    instance may override the code for generic classes such as
    :class:`Terminal`.

    Attributes:
        code: the stable ``X_...`` code.
        cause: what happened, in one sentence without secrets or app values.
        fix: one runnable command or edit that resolves it.
        meta: optional structured details (ids, counts, delays).
    """

    code: str = "X_JOBS_ERROR"
    retry_class: RetryClass = RetryClass.UNCLASSIFIED
    default_fix: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            register_error_code(cls.code, cls.retry_class)

    def __init__(
        self,
        cause: str,
        *,
        fix: str | None = None,
        meta: Mapping[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        if code is not None:
            self.code = code
        self.cause = cause
        self.fix = fix if fix is not None else self.default_fix
        self.meta: dict[str, Any] = dict(meta or {})
        super().__init__(self.render())

    def render(self) -> str:
        """Return ``"CODE: cause (fix: ...)"``, the text stored on a job row."""
        text = f"{self.code}: {self.cause}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep errors picklable across processes despite the keyword-only
        # init (the supervisor and the tests move them between processes).
        return (_rebuild, (type(self), self.cause, self.fix, self.meta, self.code))


def _rebuild(
    cls: type[JobsError], cause: str, fix: str, meta: dict[str, Any], code: str
) -> JobsError:
    # Subclasses have their own signatures: restore the fields directly.
    error = cls.__new__(cls)
    error.code, error.cause, error.fix, error.meta = code, cause, fix, meta
    Exception.__init__(error, error.render())
    return error


class ErrorCodeDuplicate(JobsError):
    """Two registrations claimed one error code."""

    code = "X_ERROR_CODE_DUPLICATE"
    retry_class = RetryClass.NOT_IN_JOB


def register_error_retry(code: str, retry: RetryClass | str) -> None:
    """Set how the worker retries an attempt that failed with ``code``.

    Apps call this for their own codes (``X_PAYMENT_DECLINED`` terminal,
    say). Unlike :func:`register_error_code` it may reclassify a code.
    """
    if not code.startswith("X_"):
        raise ValueError(f"error codes look like X_UPPER_SNAKE, not {code!r}")
    _REGISTRY[code] = RetryClass(retry)


def retry_class_of(code: str | None) -> RetryClass:
    """Return the registered retry class of ``code`` (unclassified if unknown)."""
    if code is None:
        return RetryClass.UNCLASSIFIED
    return _REGISTRY.get(code, RetryClass.UNCLASSIFIED)


def registered_codes() -> dict[str, RetryClass]:
    """Return a copy of the code table, sorted by code."""
    return dict(sorted(_REGISTRY.items()))


def code_of(error: BaseException) -> str | None:
    """Return the ``X_...`` code carried by ``error``, if any.

    Any exception with a string ``code`` attribute starting with ``X_``
    counts, so apps can use their own exception classes.
    """
    code = getattr(error, "code", None)
    if isinstance(code, str) and code.startswith("X_"):
        return code
    return None


def interrupts_the_process(error: BaseException) -> bool:
    """Whether ``error`` stops the process rather than failing the body that raised it.

    Python delivers Ctrl-C (SIGINT) as a ``KeyboardInterrupt`` in the main
    thread only, so there it may be the user stopping ``run_jobs()`` or a
    test run, and it propagates (as Django's ImmediateBackend lets it). In
    any other thread, a slot thread of ``runjobs`` say, a
    ``KeyboardInterrupt`` was raised by the body itself, and ``SystemExit``
    (``sys.exit()``, ``exit()``) always is: both fail that attempt like any
    other exception, and the worker carries on.
    """
    return (
        isinstance(error, KeyboardInterrupt)
        and threading.current_thread() is threading.main_thread()
    )


# -- Generic errors apps raise inside job bodies -----------------------------


class Terminal(JobsError):
    """Raise to fail the job now, without spending the remaining attempts."""

    code = "X_JOB_TERMINAL"
    retry_class = RetryClass.TERMINAL

    def __init__(self, cause: str = "the job refused to retry", **kwargs: Any) -> None:
        super().__init__(cause, **kwargs)


class RetryAfter(JobsError):
    """Raise to retry after ``seconds`` (capped by the policy's ``max_delay``).

    The attempt still counts. For "not yet" without spending an attempt,
    raise :class:`RateLimited`.
    """

    code = "X_JOB_RETRY_AFTER"
    retry_class = RetryClass.RETRY_AFTER

    def __init__(self, seconds: float, cause: str | None = None, **kwargs: Any) -> None:
        meta = dict(kwargs.pop("meta", None) or {})
        meta["retry_after_seconds"] = float(seconds)
        super().__init__(cause or f"retry after {seconds:g}s", meta=meta, **kwargs)


class RateLimited(JobsError):
    """Raise when a rate limit says "not yet": rescheduled, attempt not spent.

    ``seconds`` (optional) is a floor for the wait; without it the policy's
    backoff applies.
    """

    code = "X_RATE_LIMITED"
    retry_class = RetryClass.RETRY_AFTER

    def __init__(
        self, seconds: float | None = None, cause: str | None = None, **kwargs: Any
    ) -> None:
        meta = dict(kwargs.pop("meta", None) or {})
        if seconds is not None:
            meta["retry_after_seconds"] = float(seconds)
        super().__init__(cause or "rate limited", meta=meta, **kwargs)


APP_CODES = {"X_OVERLOADED": RetryClass.RETRY_AFTER, "X_TIMEOUT": RetryClass.RETRYABLE}
"""Codes apps raise with their own exception classes; their retry class is fixed."""
for _code, _retry in APP_CODES.items():
    register_error_code(_code, _retry)

# -- Declaration and enqueue refusals ----------------------------------------


class JobDeclarationInvalid(JobsError):
    """A ``@job(...)`` declaration is invalid (raised at import)."""

    code = "X_JOB_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "correct the @job(...) arguments named in the message"


class JobDuplicate(JobsError):
    """Two declarations share a job name, or a live job already holds the key."""

    code = "X_JOB_DUPLICATE"
    retry_class = RetryClass.UNCLASSIFIED


class JobInputInvalid(JobsError):
    """Input refused at enqueue (signature, JSON round trip, schema); nothing written."""

    code = "X_JOB_INPUT_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "pass JSON-safe keyword arguments matching the job function's signature"
    )


class OutboxNoTransaction(JobsError):
    """``OUTBOX = "required"`` and an enqueue ran outside a transaction
    (``using(outbox=False)`` counts as outside one)."""

    code = "X_OUTBOX_NO_TX"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "enqueue inside transaction.atomic(using=<OUTBOX_DATABASE>) without "
        "using(outbox=False); for enqueues outside a transaction to insert "
        "directly, set ULTIMATE_JOBS['OUTBOX'] = True"
    )


class JobOptionUnknown(JobInputInvalid, TypeError):
    """``using()`` was given an option it does not take (``X_JOB_INPUT_INVALID``).

    Also a ``TypeError``, which Python raises for an unknown keyword, so
    ``except TypeError`` written for the plain call keeps catching it.
    """


class JobUnknown(JobsError):
    """No job is registered under that name in this process."""

    code = "X_JOB_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "check the name, and that the app's jobs.py is imported (INSTALLED_APPS)"
    )


class DriverUnavailable(JobsError):
    """The job driver cannot serve the request (configuration or schema drift)."""

    code = "X_DRIVER_UNAVAILABLE"
    retry_class = RetryClass.RETRYABLE
    default_fix = "python manage.py migrate ultimate_jobs"


class InstalledAppsIncomplete(JobsError, ImproperlyConfigured):
    """INSTALLED_APPS lacks an app django-ultimate-jobs needs (raised at startup)."""

    code = "X_INSTALLED_APPS_INCOMPLETE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = 'add "pgtrigger" to INSTALLED_APPS in settings.py'


class JobsTablesMissing(JobsError):
    """A statement met no jobs table: the app is not installed, or not migrated."""

    code = "X_JOBS_TABLES_MISSING"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py migrate ultimate_jobs"


class DevDatabaseUnavailable(JobsError):
    """The embedded development PostgreSQL could not be started or stopped."""

    code = "X_DEVDB_UNAVAILABLE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = 'pip install "django-ultimate-jobs[embedded]"'


class SettingsInvalid(JobsError):
    """The ULTIMATE_JOBS setting holds an unknown key or an invalid value."""

    code = "X_SETTINGS_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "correct ULTIMATE_JOBS in settings.py (see docs/reference/settings.md)"
    )


class DurationInvalid(JobsError):
    """A duration is not '30s'/'5m'/'3d', milliseconds, or a positive timedelta."""

    code = "X_DURATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = 'write durations as "500ms", "30s", "5m", "2h", "3d", an int of ms, or a timedelta'


# -- Driver contract ---------------------------------------------------------


class ClaimQueuesEmpty(JobsError):
    """A claim named no queue."""

    code = "X_JOB_CLAIM_QUEUES_EMPTY"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pass at least one queue name"


class JobRowStatusUnknown(JobsError):
    """A stored state this build does not know (usually a newer deploy's row)."""

    code = "X_JOB_ROW_STATUS_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "deploy the newer version of django-ultimate-jobs on every worker"


class JobLeaseLost(JobsError):
    """This attempt no longer holds the job (cancelled or re-claimed elsewhere)."""

    code = "X_JOB_LEASE_LOST"
    retry_class = RetryClass.UNCLASSIFIED
    default_fix = "nothing to do: the job belongs to another attempt now"


class JobNotFound(JobsError):
    """No job has that id."""

    code = "X_JOB_NOT_FOUND"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "check the id: python manage.py jobs ls --id-prefix <its first digits> "
        "finds a job that still exists"
    )


class JobNotRequeueable(JobsError):
    """A requeue of a job that is still live."""

    code = "X_JOB_NOT_REQUEUEABLE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "wait for the job to finish, or cancel it first"


class JobNotPromotable(JobsError):
    """A promote of a job that is not waiting on its run time."""

    code = "X_JOB_NOT_PROMOTABLE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "only ready or delayed jobs can be promoted"


class JobNotCancellable(JobsError):
    """A cancel of a finished or unknown job."""

    code = "X_JOB_NOT_CANCELLABLE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs show <id>"


class JobNotRemovable(JobsError):
    """A remove of a running job."""

    code = "X_JOB_NOT_REMOVABLE"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "cancel the job first, then remove it"


class JobPageInvalid(JobsError):
    """A job listing asked for a page it cannot have (cursor, limit, filter)."""

    code = "X_JOB_PAGE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pass a limit of 1 to 200 and a cursor a previous page answered"


# -- Raised inside attempts ---------------------------------------------------


class JobTimeout(JobsError):
    """The attempt (or one step) passed its declared timeout; it was cancelled first."""

    code = "X_JOB_TIMEOUT"
    retry_class = RetryClass.RETRYABLE
    default_fix = "raise the job's timeout=, or make the body check ctx.cancellation"


class Draining(JobsError):
    """The worker is shutting down; the attempt is handed back uncounted."""

    code = "X_DRAINING"
    retry_class = RetryClass.RETRYABLE
    default_fix = "nothing to do: another worker picks the job up"


class Aborted(JobsError):
    """A cancelled attempt tried to write (a step, progress)."""

    code = "X_ABORTED"
    retry_class = RetryClass.UNCLASSIFIED
    default_fix = "check ctx.cancellation in long loops and stop when it is set"


class JobProgressInvalid(JobsError):
    """``ctx.progress()`` was given a non-finite number or an overlong note."""

    code = "X_JOB_PROGRESS_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "pass finite numbers to ctx.progress(done, total) and a note of at most "
        "200 characters"
    )


class JobOnSettledFailed(JobsError):
    """The on_settled hook raised on every try (logged, never raised to callers)."""

    code = "X_JOB_ON_SETTLED_FAILED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "make on_settled idempotent and fast; record reliable effects in a step"
    )


class JobSlotLost(JobsError):
    """A capped run lost its fleet-wide slot (its renewal found it lapsed or taken)."""

    code = "X_JOB_SLOT_LOST"
    retry_class = RetryClass.UNCLASSIFIED
    default_fix = (
        "nothing to do: the run was stopped so the cap holds, and it is retried; "
        "if it recurs, the worker stalls longer than VISIBILITY_TIMEOUT"
    )


class JobKeyBusy(JobsError):
    """A ``when_busy="fail"`` job found its concurrency key held by another run."""

    code = "X_JOB_KEY_BUSY"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "python manage.py jobs retry <id> once the other run is done, or declare "
        'when_busy="wait"'
    )


class JobIdInvalid(JobsError):
    """An operator command was given something that is not a job id."""

    code = "X_JOB_ID_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pass the job's UUID, as shown by the admin or a log line"


class StepDuplicate(JobsError):
    """Two steps share a name in one run (a defect that replays identically)."""

    code = "X_STEP_DUPLICATE"
    retry_class = RetryClass.TERMINAL
    default_fix = "give each ctx.step call its own name (e.g. f'charge:{invoice_id}')"


class StepOutputUnserializable(JobsError):
    """A step returned something that cannot be stored as JSON."""

    code = "X_STEP_OUTPUT_UNSERIALIZABLE"
    retry_class = RetryClass.TERMINAL
    default_fix = "return ids, strings, numbers, lists and dicts from the step"


class StepNameInvalid(JobsError):
    """A step name that is empty, too long or not storable in PostgreSQL."""

    code = "X_STEP_NAME_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = "name steps with non-empty strings of at most 512 UTF-8 bytes"


class StepAtomicUnsupported(JobsError):
    """``ctx.step.run(..., atomic=True)`` on a driver whose steps cannot be
    written in the caller's database transaction (the Redis driver)."""

    code = "X_STEP_ATOMIC_UNSUPPORTED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "drop atomic=True and make the step's writes idempotent, or keep the "
        'jobs in PostgreSQL (ULTIMATE_JOBS["DRIVER"] = "postgres")'
    )


class StepNotFound(JobsError):
    """A retry from a step the job's run never recorded."""

    code = "X_STEP_NOT_FOUND"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "retry from a step the run recorded: python manage.py jobs show <id> lists them"
    )


class JobEventInvalid(JobsError):
    """A matched event's payload is refused by the wait's schema."""

    code = "X_JOB_EVENT_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = "publish payloads the waiting schema accepts; retry the job to read the next event"


# -- Maintenance (retention, partitions) -------------------------------------


class PartitionInvalid(JobsError):
    """A ``partitioned(...)`` declaration is refused (raised where it is made)."""

    code = "X_PARTITION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass a model, a DateField or DateTimeField name, interval "
        '"day"/"week"/"month", ahead >= 0 and retain >= 1'
    )


class DbLockTimeout(JobsError):
    """A maintenance statement waited longer than its ``lock_timeout`` for a lock."""

    code = "X_DB_LOCK_TIMEOUT"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "retry later (the job retries by itself); find the long transaction "
        "holding the table in pg_stat_activity"
    )


# -- Cron tasks ---------------------------------------------------------------


class CronInvalid(JobsError):
    """A cron expression is not five valid fields (or a macro), or never fires."""

    code = "X_CRON_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "write five fields, e.g. cron='0 9 * * *' (minute hour day month weekday)"
    )


class TimezoneInvalid(JobsError):
    """A task's ``tz`` is missing, unknown, or a fixed offset without DST rules."""

    code = "X_TIMEZONE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "name an IANA zone, e.g. tz='Europe/Paris' (or tz='UTC')"


class TaskDeclarationInvalid(JobsError):
    """A ``task(...)`` declaration is invalid (raised at import)."""

    code = "X_TASK_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "correct the task(...) arguments named in the message"


class TaskUnknown(JobsError):
    """No cron task is declared under that name in this process."""

    code = "X_TASK_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "name a declared task: python manage.py jobs tasks lists them"


# -- Ledger postings ------------------------------------------------------------


class LedgerUnbalanced(JobsError):
    """A posting's entries do not sum to zero in some currency; nothing written."""

    code = "X_LEDGER_UNBALANCED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "make the entries of each currency sum to zero (debits positive, "
        "credits negative)"
    )


class LedgerEntryInvalid(JobsError):
    """A posting is not well-formed Money; nothing written."""

    code = "X_LEDGER_ENTRY_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        'write each amount as {"minor": <int>, "currency": "<ISO 4217>"}, '
        "each account as a non-blank string, and at least two entries"
    )


class LedgerPostingConflict(JobsError):
    """The posting key is already stored with other lines; nothing written."""

    code = "X_LEDGER_POSTING_CONFLICT"
    retry_class = RetryClass.TERMINAL
    default_fix = "post a correction under a new key; a stored posting never changes"


# -- Backfills ----------------------------------------------------------------


class BackfillDeclarationInvalid(JobsError):
    """A ``backfill(...)`` declaration is invalid (raised where it is made)."""

    code = "X_BACKFILL_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass name=, source= (a callable answering a QuerySet), handle=, "
        "batch >= 1 and a finite rate > 0"
    )


class BackfillUnknown(JobsError):
    """No backfill is declared under that name (a command argument or a ``requires=``)."""

    code = "X_BACKFILL_UNKNOWN"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "python manage.py jobs_backfill --list  (lists the declared backfills)"
    )


class BackfillRequiresCycle(JobsError):
    """The ``requires=`` of some backfills form a cycle: none of them can ever run."""

    code = "X_BACKFILL_REQUIRES_CYCLE"
    retry_class = RetryClass.TERMINAL
    default_fix = "remove one requires= entry of the backfills named in the message"


class BackfillRequiresPending(JobsError):
    """A backfill was asked to run before the backfills it requires are done."""

    code = "X_BACKFILL_REQUIRES_PENDING"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "python manage.py jobs_backfill --all --write (runs them in dependency order)"
    )


class BackfillApplied(JobsError):
    """The backfill is done already; running it again needs ``--force``."""

    code = "X_BACKFILL_APPLIED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs_backfill <name> --write --force"


class BackfillPaused(JobsError):
    """The backfill is paused by an operator; it runs again once resumed."""

    code = "X_BACKFILL_PAUSED"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "resume it on the admin's Backfills page (or pass --force to start over)"
    )


class BackfillStateInvalid(JobsError):
    """Pause or resume asked of a backfill in a state that has no such move."""

    code = "X_BACKFILL_STATE_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "pause a pending, running or failed backfill; resume a paused one"


class BackfillSourceInvalid(JobsError):
    """``source()`` answered no QuerySet, or its primary key cannot be a keyset cursor."""

    code = "X_BACKFILL_SOURCE_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "make source= answer a QuerySet of a model whose primary key is a "
        "number, a string or a UUID"
    )


# -- Locks ----------------------------------------------------------------------


class LockInvalid(JobsError):
    """A ``lock(...)`` call or a fenced write was given a bad key, ttl, wait or token."""

    code = "X_LOCK_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "pass a non-blank key of at most 200 characters, ttl >= 1s "
        "(e.g. '30s'), wait >= 0, and a token from held.token"
    )


class LockNotAcquired(JobsError):
    """Another holder kept the lock for the whole ``wait``."""

    code = "X_LOCK_NOT_ACQUIRED"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "retry later (a job retries by itself), or wait longer: lock(..., wait='30s')"
    )


class LockLost(JobsError):
    """A held lock lapsed or was taken before its block ended: the work was not exclusive."""

    code = "X_LOCK_LOST"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "keep the block shorter than its ttl between renewals (renewals need "
        "the database), or raise ttl; write through fenced_update() so a lost "
        "holder's writes are refused"
    )


class LockNotFound(JobsError):
    """``jobs leases --release``: no row is stored under that lock key."""

    code = "X_LOCK_NOT_FOUND"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "check the key: python manage.py jobs leases --prefix lock: lists the "
        "stored locks (a released or swept lock has no row)"
    )


class LockTokenStale(JobsError):
    """A fenced write presented a token older than the one already stored."""

    code = "X_LOCK_TOKEN_STALE"
    retry_class = RetryClass.RETRYABLE
    default_fix = (
        "nothing to repair: a later holder of the lock wrote first; take the "
        "lock again (a job retries by itself) and redo the work"
    )
