"""The storage seam: the ``JobDriver`` protocol and the records it speaks.

Internal and unstable, like River's ``riverdriver``: apps use ``@job`` and
the operator module, never a driver directly. :class:`JobDriver` is the
WHOLE contract: every verb and attribute a caller outside ``drivers/`` uses
is declared here, and a caller tests a declared flag (``driver.features``)
rather than probing for a name or a class. Its roles are declared objects:
``steps`` and ``events`` (:mod:`.steps`), ``leases`` (:mod:`.leases`),
``cron`` (:mod:`.cron`), ``maintenance`` (:mod:`.maintenance`) and
``sessions`` (:mod:`.sessions`). Driver authors build on
:class:`~.basedriver.BaseDriver` (the shared defaults), name their class by
dotted path in ``ULTIMATE_JOBS["DRIVER"]``, and prove it with
``django_ultimate_jobs.testing.conformance`` (docs/howto/writing-a-driver.md).

Every write that belongs to an attempt is fenced on the attempt's
:class:`ClaimIdentity` (``state = running``, ``claimed_by``, ``claims``):
``ack``/``nack``/``heartbeat`` answer whether they LANDED, and ``False``
means this worker no longer owns the row. They never raise for that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol
from uuid import UUID

from ..states import JobState

if TYPE_CHECKING:
    from ..clock import Clock
    from .cron import CronStore
    from .features import DriverFeatures
    from .leases import LeaseStore
    from .maintenance import MaintenanceStore
    from .sessions import Connectivity, WakeListener
    from .steps import EventStore, StepStore

__all__ = [
    "COUNTER_FIELDS",
    "DEFAULT_QUEUE",
    "HISTORY_RETRIED",
    "LEASE_LAPSED_FINAL_ATTEMPT",
    "LEASE_LAPSED_UNSTARTED",
    "MAX_BULK_ROWS",
    "MAX_JOB_PAGE",
    "AckRequest",
    "BulkResult",
    "ClaimIdentity",
    "ClaimOptions",
    "ClaimResult",
    "ClaimedJob",
    "CounterBucket",
    "CounterCounts",
    "CounterTotal",
    "EnqueueRequest",
    "Enqueued",
    "Handover",
    "JobDriver",
    "JobFilter",
    "JobRecord",
    "NackRequest",
    "PausedName",
    "QueueStats",
    "Renewed",
    "WorkerRecord",
    "nack_state",
]

DEFAULT_QUEUE = "default"
HISTORY_RETRIED = "retried"
"""The ``event`` of the history entry an operator retry appends."""
LEASE_LAPSED_FINAL_ATTEMPT = (
    "X_JOB_LEASE_LOST: the lease lapsed on the final attempt (the worker died or "
    "stalled); no attempts remain (fix: python manage.py jobs retry <id>)"
)
LEASE_LAPSED_RECLAIMED = (
    "X_JOB_LEASE_LOST: the lease lapsed (the worker died or stalled); the job was "
    "claimed again"
)
LEASE_LAPSED_UNSTARTED = (
    "X_JOB_LEASE_LOST: the lease lapsed before this attempt was known to have "
    "started (its worker died or stalled, maybe running another job); the attempt "
    "was not counted and the job was claimed again"
)
MAX_ERROR_STACK_LENGTH = 8_000
MAX_BULK_ROWS = 1_000
"""Rows one bulk operator call moves at most (``remaining`` says the rest)."""
MAX_JOB_PAGE = 200
"""Rows one job listing page holds at most."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EnqueueRequest:
    """One job to insert. ``input`` is already validated and JSON-safe."""

    name: str
    input: Mapping[str, Any]
    queue: str = DEFAULT_QUEUE
    idempotency_key: str | None = None
    max_attempts: int = 3
    priority: int = 0
    run_at: datetime | None = None
    """An absolute due time (the enqueuer's clock); wins over ``delay_ms``."""
    delay_ms: int = 0
    """Due this long after the database's now (the database clock decides)."""
    tenant_id: str | None = None
    id: UUID | None = None
    """Caller-allocated id (the outbox): a re-publish of it dedupes."""
    run_id: UUID | None = None
    on_conflict: Literal["dedupe", "error"] = "dedupe"
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None
    """The lease key a run takes a slot under (``job:<name>`` or
    ``job-key:<URI-encoded name>:<key>``); ``None``: uncapped."""
    concurrency_limit: int | None = None
    """Slots of ``concurrency_key`` (runs of it at once, fleet-wide)."""
    input_json: str | None = None
    """``input`` as the compact JSON text the enqueue's checks already made
    (``validation.json_text``), so a driver storing text does not encode it
    again; ``None`` = the driver encodes ``input``. Must be that text."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The answer to an enqueue: ids are known on every path."""

    id: UUID
    run_id: UUID
    deduped: bool
    enqueued_at: datetime | None = None
    """The inserted row's ``created_at``, when the driver read it back with the
    insert (``enqueue``; ``None`` for a dedupe and for ``enqueue_many``)."""


@dataclass(frozen=True, slots=True)
class ClaimIdentity:
    """Who holds a claim: every later write of the attempt presents it."""

    worker_id: str
    claim: int


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRecord:
    """A job row as the operator surface and the buried-row report see it."""

    id: UUID
    name: str
    queue: str
    input: dict[str, Any]
    idempotency_key: str | None
    run_id: UUID
    attempt: int
    max_attempts: int
    priority: int
    state: JobState
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    tenant_id: str | None = None
    last_error: str | None = None
    last_error_stack: str | None = None
    progress: dict[str, Any] | None = None
    claimed_by: str | None = None
    claims: int = 0
    visible_at: datetime | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    claimed_at: datetime | None = None
    result: Any = None
    history: list[dict[str, Any]] | None = None
    """One entry per counted attempt: ``attempt``, ``worker``, ``at`` and,
    when the attempt failed, ``error``; and one per operator retry:
    ``event`` (:data:`HISTORY_RETRIED`), ``at`` and, for a retry from a
    step, ``from_step``. A retry restarts ``attempt`` at 1, so the entries
    in order are the attempts' true sequence."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedJob:
    """A job handed to a worker: running, leased until ``visible_at``."""

    id: UUID
    name: str
    queue: str
    input: dict[str, Any]
    run_id: UUID
    attempt: int
    max_attempts: int
    priority: int
    claims: int
    claimed_by: str
    visible_at: datetime
    tenant_id: str | None = None
    idempotency_key: str | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    claimed_at: datetime | None = None
    """The database time of this claim (steps measure time from it)."""
    retaken: bool = False
    """A lapsed lease re-taken by this claim."""
    start_recorded: bool = False
    """The claim recorded this attempt as started (``ClaimOptions.start_now``)."""
    concurrency_key: str | None = None
    """The lease key whose slot this claim holds (``None``: uncapped)."""
    run_at: datetime | None = None
    """When the row was due (the database time): the pickup latency is
    ``claimed_at - run_at``. ``None`` when the driver does not answer it."""
    key_busy: bool = False
    """Claimed WITHOUT a slot, to be refused: a ``when_busy="fail"`` job whose
    key every live holder of is another job (``ClaimOptions.refuse_busy``).
    The worker settles it ``failed`` (``X_JOB_KEY_BUSY``, attempt given back)
    and never runs its body."""

    @property
    def needs_start_mark(self) -> bool:
        """A re-taken row whose start must be recorded before its body runs."""
        return self.retaken and not self.start_recorded

    @property
    def identity(self) -> ClaimIdentity:
        """The fence every later write of this attempt presents."""
        return ClaimIdentity(self.claimed_by, self.claims)


@dataclass(frozen=True, kw_only=True, slots=True)
class Handover:
    """What a settle may claim in the slots it frees (``ack_many_handover``):
    up to ``limit`` heirs, one per key, for ``worker_id`` in ``queues``;
    the slots of the keys in ``release`` are freed, never handed over."""

    queues: Sequence[str]
    limit: int
    worker_id: str
    visibility_ms: int
    release: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimOptions:
    """What one claim asks for."""

    queues: Sequence[str]
    limit: int
    worker_id: str
    visibility_ms: int
    drop_exhausted: frozenset[str] = field(default_factory=frozenset)
    """Job names whose lease-lapsed burial is ``failed``, not ``dead``."""
    registry_ttl_ms: int | None = None
    """When set, also refresh this worker's registry row (idle workers)."""
    retake: int | None = None
    """At most this many lapsed leases re-taken (``None``: up to ``limit``).
    Exhausted ones count too: they are buried, not claimed."""
    start_now: int = 0
    """Record the first this-many rows (claim order, lapsed ones excepted) as
    started: the worker hands them to idle slots at once. A lapse charges an
    attempt only when its start was recorded, so jobs held ahead lose
    nothing to a crash."""
    skip_tenants: frozenset[str | None] = field(default_factory=frozenset)
    """Tenants whose ready and due rows the claim skips (``None``: rows
    without a tenant): the tenants at their in-process limit
    (``worker/limits.py``). The ordinary claim only: lapsed leases, and
    rows carrying a concurrency key (``capped``), are claimed whatever their
    tenant, and the worker sheds those over a limit."""
    capped: int = 0
    """Also claim up to this many rows carrying a concurrency key
    (``job(concurrency=...)``), each only with a free fleet-wide slot of its
    key (within ``limit``); the first ``start_now`` are recorded started, as
    the ordinary claim records its rows. 0: capped rows are left alone (the
    uncapped claim runs exactly as for a worker that declares no limit)."""
    uncapped: bool = True
    """Claim rows without a concurrency key too (the ordinary claim). A
    capped worker whose last claim found none leaves it out until a wake or
    a poll interval passes: the claim of a queue of capped rows was two
    statements per run (see ``Worker._uncapped_due``)."""
    refuse_busy: frozenset[str] = field(default_factory=frozenset)
    """Job names declared ``when_busy="fail"``: a due row of one whose key's
    live slots are all held by OTHER jobs is claimed as ``key_busy``, to be
    refused (``capped`` only)."""


class Renewed(set[UUID]):
    """The ids a heartbeat renewed, and those of them whose slot was lost."""

    slots_lost: frozenset[UUID]

    def __init__(
        self, landed: Iterable[UUID] = (), slots_lost: Iterable[UUID] = ()
    ) -> None:
        super().__init__(landed)
        self.slots_lost = frozenset(slots_lost)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """Claimed rows, and the rows the claim buried (final attempt lapsed)."""

    claimed: list[ClaimedJob]
    buried: list[JobRecord]


@dataclass(frozen=True, kw_only=True, slots=True)
class AckRequest:
    """One successful attempt to settle."""

    job_id: UUID
    identity: ClaimIdentity
    duration_ms: int = 0
    counted: bool = True
    """False: finished without running here; adds nothing to the counters."""
    result: Any = None
    """The handler's return value, stored when JSON-safe (else ``None``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NackRequest:
    """One attempt handed back: retried, parked, dead-lettered or dropped."""

    job_id: UUID
    identity: ClaimIdentity
    delay_ms: int = 0
    run_at: datetime | None = None
    """Due at this instant (a step's wake time) instead of ``delay_ms`` from now."""
    error: str | None = None
    stack: str | None = None
    counts_as_attempt: bool = True
    park: bool = False
    dead_letter: bool = False
    fail: bool = False
    duration_ms: int = 0


def nack_state(request: NackRequest) -> JobState:
    """The one definition every driver uses: dead-letter > fail > park > ready."""
    if request.dead_letter:
        return JobState.DEAD
    if request.fail:
        return JobState.FAILED
    if request.park:
        return JobState.SUSPENDED
    return JobState.READY


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueStats:
    """One queue's depth; the six buckets are mutually exclusive."""

    queue: str
    ready: int = 0
    """Due rows (ready or delayed state, ``run_at`` passed)."""
    delayed: int = 0
    """Rows not yet due (ready or delayed state)."""
    running: int = 0
    suspended: int = 0
    failed: int = 0
    dead: int = 0
    oldest_ready_ms: int | None = None
    """Age of the oldest due ready/delayed row, or ``None``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRecord:
    """One worker process in the registry."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    in_flight: list[str]
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class PausedName:
    """A paused queue or task."""

    name: str
    paused_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class JobFilter:
    """Which jobs a listing or a bulk verb reads; ``None`` means any.

    The operator module validates and normalises it (an id prefix becomes
    the inclusive ``id_min``/``id_max`` range, so the primary key serves it).
    """

    queue: str | None = None
    name: str | None = None
    states: frozenset[JobState] | None = None
    tenant_id: str | None = None
    id_min: UUID | None = None
    id_max: UUID | None = None
    created_from: datetime | None = None
    """Inclusive."""
    created_to: datetime | None = None
    """Exclusive."""
    error_code: str | None = None
    """Rows whose last error's text before its first colon is ``error_code``
    (the dead-letter groups: ``X_CODE: ...``, or a bare ``RuntimeError``)."""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk verb moved, and what a second call could still move."""

    affected: int
    remaining: int


@dataclass(frozen=True, kw_only=True, slots=True)
class CounterCounts:
    """What a counter bucket counts: settled outcomes, attempt time, pickups.

    ``pickups`` counts the settled attempts (acks and nacks that count, not
    burials) whose pickup latency, from due (``run_at``) to claimed, adds
    up in ``pickup_ms``.
    """

    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0
    pickups: int = 0
    pickup_ms: int = 0


COUNTER_FIELDS = tuple(counted.name for counted in fields(CounterCounts))
"""The counted fields of a bucket, in order."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CounterTotal(CounterCounts):
    """One job name's settled outcomes summed over a window."""

    job: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CounterBucket(CounterCounts):
    """One counter bucket: a job name's outcomes on one queue in one interval.

    Settles add to the 1-minute bucket of their job name and queue; the
    roll-up folds them into 5-minute and then 1-hour buckets (``width_ms``).
    """

    job: str
    queue: str
    width_ms: int
    start: datetime


class JobDriver(Protocol):
    """What a storage backend must do. Proven by the conformance suite.

    Every attribute below is always present (no caller probes for one);
    what a driver cannot do is a ``False`` flag of :attr:`features`.
    """

    @property
    def name(self) -> str:
        """A short name for logs and errors (``"postgres"``, ``"memory"``)."""
        ...

    @property
    def features(self) -> DriverFeatures:
        """The declared capability flags (:mod:`.features`)."""
        ...

    @property
    def alias(self) -> str | None:
        """The Django database alias holding the job rows (``None``: the rows
        are in no Django database). With ``features.joins_caller_transaction``
        / ``atomic_steps``, the alias whose transaction they join."""
        ...

    @property
    def clock(self) -> Clock:
        """The clock the driver was built with (a test's ``ManualClock``, or
        the system clock): read locally, without asking the store. Its
        ``sql_now()`` is ``None`` when the store's own clock decides."""
        ...

    @property
    def steps(self) -> StepStore:
        """Step records of runs (:mod:`.steps`)."""
        ...

    @property
    def events(self) -> EventStore:
        """Published events and the waits that match them (:mod:`.steps`)."""
        ...

    @property
    def leases(self) -> LeaseStore:
        """Fleet-wide slots and locks (:mod:`.leases`)."""
        ...

    @property
    def cron(self) -> CronStore:
        """Cron tasks, their pauses and the leader lease (:mod:`.cron`)."""
        ...

    @property
    def maintenance(self) -> MaintenanceStore:
        """Retention purges and the counter roll-up (:mod:`.maintenance`)."""
        ...

    @property
    def sessions(self) -> Connectivity:
        """The connections a worker's threads hold to the store (:mod:`.sessions`)."""
        ...

    def now(self) -> datetime:
        """The store's time: the one answer to "what time is it" for job rows.

        The frozen instant of a test clock; else the store's own clock (one
        round trip on PostgreSQL: ``SELECT now()``). For a reading without a
        round trip (pacing, a step's clock), use :attr:`clock`.
        """
        ...

    def wake_listener(
        self,
        on_wake: WakeCallback,
        *,
        worker_id: str,
        on_live: Callable[[bool], None] | None = None,
    ) -> WakeListener | None:
        """A listener (not started) that calls ``on_wake(queue)`` for each of
        the store's wake hints (``""``: any queue), and ``on_live(live)`` when
        the wake is proven or lost; ``None`` unless ``features.wake_listener``.
        """
        ...

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        """Insert one job (or dedupe onto the live holder of its key).

        Raises:
            JobDuplicate: ``on_conflict="error"`` and a live job holds the key.
        """
        ...

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many jobs in one round trip; answers in request order."""
        ...

    def claim(self, options: ClaimOptions) -> ClaimResult:
        """Claim due jobs; re-take lapsed leases; bury lapsed final attempts.

        Raises:
            ClaimQueuesEmpty: ``options.queues`` is empty (before any statement).
        """
        ...

    def ack(self, request: AckRequest) -> bool:
        """Settle a successful attempt (``done``); fenced. True if it landed."""
        ...

    def ack_many(self, requests: Sequence[AckRequest]) -> list[bool]:
        """Settle many successful attempts in one round trip, in order."""
        ...

    def ack_many_handover(
        self, requests: Sequence[AckRequest], handover: Handover | None
    ) -> tuple[list[bool], list[ClaimedJob]]:
        """:meth:`ack_many`; with ``handover`` (and ``features.slot_handover``)
        a settled capped row's slot goes to its key's next ready row, claimed
        in the same write for ``handover.worker_id``. Answers whether each
        ack landed, in order, and the rows claimed (none without the feature).
        """
        ...

    def nack(self, request: NackRequest) -> bool:
        """Hand an attempt back (state per :func:`nack_state`); fenced."""
        ...

    def heartbeat(
        self, job_id: UUID, *, visibility_ms: int, identity: ClaimIdentity | None
    ) -> bool:
        """Extend a running job's lease. ``False``: the caller must stop the run."""
        ...

    def heartbeat_many(
        self, held: Iterable[tuple[UUID, ClaimIdentity]], *, visibility_ms: int
    ) -> Renewed:
        """Extend many leases in one round trip; answers the ids that landed.

        The held fleet-wide slots of capped runs are renewed with them; a
        landed id whose slot had lapsed (or was taken) is also in
        ``slots_lost``: its run must stop (``X_JOB_SLOT_LOST``).
        """
        ...

    def mark_started(self, job_id: UUID, identity: ClaimIdentity) -> bool:
        """Record that this claim's body starts now; fenced. True if it landed.

        The worker calls it before the body of a re-taken lapsed lease whose
        start the claim did not record (``ClaimedJob.needs_start_mark``): a
        later lapse of that claim then charges its attempt, and one that
        never started is not charged.
        """
        ...

    def record_progress(
        self, job_id: UUID, identity: ClaimIdentity, progress: Mapping[str, Any]
    ) -> bool:
        """Store ``progress`` on a running job; fenced like a settle."""
        ...

    def stats(self) -> list[QueueStats]:
        """Depth per queue (queues with a counted row), sorted by name."""
        ...

    def get(self, job_id: UUID) -> JobRecord | None:
        """Return one job row, or ``None``."""
        ...

    def requeue(self, job_id: UUID, *, from_step: str | None = None) -> JobRecord:
        """Make a finished job ready again (attempt 0, due now).

        With ``from_step``, that step and the steps started after it are
        dropped (they run again); a name the run has no step of is refused,
        whatever it holds, and nothing moves.

        Raises:
            JobNotFound, JobNotRequeueable, JobDuplicate.
            StepNotFound: see :func:`step_not_found`.
        """
        ...

    def promote(self, job_id: UUID) -> JobRecord:
        """Make a job waiting on its ``run_at`` due now.

        Raises:
            JobNotFound, JobNotPromotable.
        """
        ...

    def cancel(self, job_id: UUID, *, reason: str | None = None) -> JobRecord:
        """Cancel a live job; a running one loses its fence at once.

        Raises:
            JobNotCancellable: finished or unknown.
        """
        ...

    def remove(self, job_id: UUID) -> bool:
        """Delete a job and its steps; ``False`` for an unknown id.

        Raises:
            JobNotRemovable: the job is running.
        """
        ...

    def list_jobs(
        self, where: JobFilter, *, before: UUID | None, limit: int
    ) -> list[JobRecord]:
        """One page of jobs, newest first (by id: ids are UUIDv7).

        ``before`` is the id of the previous page's last row; the page holds
        the rows after it in this order. ``limit`` is already bounded.
        """
        ...

    def count(self, where: JobFilter) -> int:
        """How many jobs match ``where``, by stored state (as ``list_jobs`` reads them).

        One cheap read for health checks and scripts: no buckets, no due-time
        split (``stats`` does that).
        """
        ...

    def requeue_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Requeue up to ``limit`` finished rows, oldest first.

        Of finished rows sharing one key, the oldest moves; rows whose key a
        live job holds stay (so "call until remaining is zero" ends).
        ``where.states`` holds finished states only (the caller checks).
        """
        ...

    def remove_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Delete up to ``limit`` rows that are not running, oldest first."""
        ...

    def promote_many(self, where: JobFilter, *, limit: int) -> BulkResult:
        """Make up to ``limit`` ready or delayed rows due now, oldest first."""
        ...

    def counter_totals(self, since: datetime) -> list[CounterTotal]:
        """Per job name, the counter buckets starting at or after ``since``."""
        ...

    def counter_buckets(self, since: datetime) -> list[CounterBucket]:
        """Every counter bucket starting at or after ``since`` (any width),
        ordered by start, job name, queue."""
        ...

    def pause_queue(self, queue: str) -> list[PausedName]:
        """Pause a queue (claims skip it from the next claim); answers the list."""
        ...

    def resume_queue(self, queue: str) -> list[PausedName]:
        """Resume a queue and wake its workers; answers the paused list."""
        ...

    def paused_queues(self) -> list[PausedName]:
        """Paused queues sorted by name."""
        ...

    def announce_worker(self, worker: WorkerRecord, *, ttl_ms: int) -> None:
        """Insert or refresh a worker's registry row (expires after ``ttl_ms``)."""
        ...

    def forget_worker(self, worker_id: str) -> None:
        """Delete a worker's registry row."""
        ...

    def workers(self) -> list[WorkerRecord]:
        """Live workers sorted by id (lapsed rows are dropped)."""
        ...

    def close(self) -> None:
        """Release what the driver holds (the memory driver forgets its rows)."""
        ...


WakeCallback = Callable[[str], None]
"""Called with a queue name (``""``: any queue) that may have work."""
