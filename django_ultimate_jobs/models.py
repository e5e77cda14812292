"""The tables: jobs, steps, events, leases, pauses, workers, counters.

The hot path (enqueue, claim, settle) never goes through these models: it
is raw SQL in ``drivers/postgres/sql/queries.sql``. The models exist for the
migrations, the admin and the operator commands, and every index the hot
path relies on is declared here so the migration carries it.
"""

from __future__ import annotations

from typing import Any

import pgtrigger
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce, Now

from .errors import InstalledAppsIncomplete
from .states import JobState

__all__ = [
    "CronTask",
    "Event",
    "Export",
    "ExportPart",
    "Import",
    "InboundDelivery",
    "Job",
    "JobCounter",
    "Lease",
    "LedgerLine",
    "LedgerPosting",
    "OutboxMessage",
    "QueuePause",
    "Reindex",
    "SearchDocument",
    "Step",
    "WebhookDelivery",
    "WebhookEndpoint",
    "Worker",
]


def _require_pgtrigger() -> None:
    # `class Meta: triggers` below is pgtrigger's Meta option, which its app
    # adds when it is installed; without it Django fails the import with
    # "TypeError: 'class Meta' got invalid attribute(s): triggers".
    from django.apps import apps

    if not apps.is_installed("pgtrigger"):
        raise InstalledAppsIncomplete(
            'INSTALLED_APPS lacks "pgtrigger", which django_ultimate_jobs needs '
            "for the triggers its models declare",
            meta={"missing": ["pgtrigger"]},
        )


_require_pgtrigger()

# The tables of the other capabilities (the ledger, consumers, subjects,
# metrics, webhooks, search, exports and the keyset passes) live beside the API that
# writes them.
from .consumers.models import Consumer  # noqa: E402,F401
from .exports.models import Export, ExportPart, Import  # noqa: E402
from .keyset.models import PassRecord  # noqa: E402
from .ledger.models import LedgerLine, LedgerPosting  # noqa: E402
from .metrics.models import MetricsSnapshot  # noqa: E402,F401
from .search.models import Reindex, SearchDocument  # noqa: E402
from .subjects.models import ErasureRecord, SubjectExportPart, SubjectRequest  # noqa: E402,F401
from .webhooks.models import (  # noqa: E402
    InboundDelivery,
    WebhookDelivery,
    WebhookEndpoint,
)

_LIVE = ["ready", "delayed", "running", "suspended"]
_WAITING = ["ready", "delayed", "suspended"]

# Every transition the drivers make (see docs/explanation/states.md). The
# state-machine trigger refuses any other, so a bug in a statement cannot, say, revive
# a cancelled job behind an operator's back.
_TRANSITIONS = [
    ("ready", "running"),
    ("ready", "cancelled"),
    ("ready", "delayed"),
    ("delayed", "running"),
    ("delayed", "ready"),
    ("delayed", "cancelled"),
    ("suspended", "running"),
    ("suspended", "ready"),
    ("suspended", "cancelled"),
    ("running", "done"),
    ("running", "ready"),
    ("running", "suspended"),
    ("running", "failed"),
    ("running", "dead"),
    ("running", "cancelled"),
    ("done", "ready"),
    ("failed", "ready"),
    ("dead", "ready"),
    ("cancelled", "ready"),
]


_STATE_MACHINE_SQL = (
    "IF EXISTS (SELECT 1 FROM old_rows o JOIN new_rows n ON n.id = o.id "
    "WHERE o.state <> n.state AND o.state || ':' || n.state <> ALL ('{"
    + ",".join(f"{a}:{b}" for a, b in _TRANSITIONS)
    + "}'::text[])) THEN RAISE EXCEPTION 'ultimate_jobs: invalid job state transition' "
    "USING ERRCODE = 'check_violation'; END IF; RETURN NULL;"
)


class TransactionIdField(models.BigIntegerField):
    """A PostgreSQL ``xid8`` (a transaction id that never wraps around)."""

    description = "PostgreSQL transaction id (xid8)"

    def db_type(self, connection: Any) -> str:
        """The column type: ``xid8`` (PostgreSQL 13 and later)."""
        return "xid8"


class Job(models.Model):
    """One unit of durable work: a row per job, updated in place across attempts."""

    id = models.UUIDField(primary_key=True)
    name = models.TextField()
    queue = models.TextField(db_default="default")
    input = models.JSONField()
    idempotency_key = models.TextField(null=True, blank=True)
    run_id = models.UUIDField()
    attempt = models.IntegerField(db_default=0)
    max_attempts = models.IntegerField(db_default=3)
    priority = models.SmallIntegerField(db_default=0)
    state = models.TextField(
        choices=[(s.value, s.value) for s in JobState], db_default=JobState.READY.value
    )
    run_at = models.DateTimeField(db_default=Now())
    visible_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.TextField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claims = models.IntegerField(db_default=0)
    started_claim = models.IntegerField(db_default=0)
    """The claim ordinal whose body is known to have started (0: none).

    Written before the body of a re-taken lapsed lease runs: a lapse charges
    an attempt only when the lapsed claim is known to have started, so jobs
    claimed ahead beside one that killed its worker lose nothing."""
    last_error = models.TextField(null=True, blank=True)
    last_error_stack = models.TextField(null=True, blank=True)
    progress = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    history = models.JSONField(null=True, blank=True)
    """One entry per counted attempt: attempt, worker, at, error (if it failed)."""
    tenant_id = models.TextField(null=True, blank=True)
    concurrency_key = models.TextField(null=True, blank=True)
    """The lease key a run takes a slot under (``job:<name>`` or
    ``job-key:<name>:<key>``), decided at enqueue; null for uncapped jobs."""
    concurrency_limit = models.IntegerField(null=True, blank=True)
    """How many runs may hold a slot of ``concurrency_key`` at once."""
    enqueued_by = models.TextField(null=True, blank=True)
    traceparent = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_job"
        indexes = [
            # The claim: ready rows of a queue in (priority desc, run_at, id).
            # Ready rows are due (a retry in backoff excepted), so an ordered
            # scan stops after the limit. Rows carrying a concurrency key are
            # not in it: a backlog waiting for slots never slows the claim of
            # the uncapped rows beside it.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "run_at",
                "id",
                name="uj_job_ready_idx",
                condition=Q(state="ready", concurrency_key__isnull=True),
            ),
            # The capped claim (job_claim_capped): ready rows by key, so one
            # probe per key finds the next key (a full key is stepped over,
            # never read through) and its best rows.
            models.Index(
                "concurrency_key",
                models.F("priority").desc(),
                "run_at",
                "id",
                name="uj_job_capped_ready_idx",
                condition=Q(state="ready", concurrency_key__isnull=False),
            ),
            # Rows waiting on a time (delayed, or suspended by a sleep or a
            # wait) are claimed once due, earliest first: kept out of the
            # ready index, a million parked rows cost a claim nothing.
            models.Index(
                "queue",
                "run_at",
                name="uj_job_timer_idx",
                condition=Q(state__in=["delayed", "suspended"]),
            ),
            # Lapsed leases are re-taken by the claim itself.
            models.Index(
                "visible_at", name="uj_job_lease_idx", condition=Q(state="running")
            ),
            # The wake silence check at enqueue: "is a ready row of this queue
            # from the current 250 ms slot still waiting?". Ready rows only,
            # so claims and settles never write to it. (Keyset listing uses
            # the primary key: ids are UUIDv7, ordered by creation time.)
            models.Index(
                "queue",
                "created_at",
                name="uj_job_wake_slot_idx",
                condition=Q(state="ready"),
            ),
            # A publish wakes the suspended jobs of the runs waiting on it.
            models.Index(
                "run_id",
                name="uj_job_suspended_run_idx",
                condition=Q(state="suspended"),
            ),
            # Retention sweeps: done rows are kept shorter than the others.
            models.Index(
                "updated_at", name="uj_job_done_idx", condition=Q(state="done")
            ),
            models.Index(
                "updated_at",
                name="uj_job_finished_idx",
                condition=Q(state__in=["failed", "dead", "cancelled"]),
            ),
        ]
        constraints = [
            # A key names at most one LIVE job per (name, tenant); finished
            # rows keep their key for history only. The enqueue statement's
            # ON CONFLICT target spells this expression exactly.
            models.UniqueConstraint(
                "name",
                Coalesce("tenant_id", models.Value("")),
                "idempotency_key",
                name="uj_job_live_key_uniq",
                # Rows without a key never conflict: keeping them out of the
                # index spares every claim and settle an index write.
                condition=Q(state__in=_LIVE) & Q(idempotency_key__isnull=False),
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=-100) & Q(priority__lte=100),
                name="uj_job_priority_range",
            ),
        ]
        triggers = [
            # The job state machine, checked once per STATEMENT over its
            # transition tables: a per-row FSM trigger (pgtrigger.FSM) cost
            # about 40 us a row and halved the claim/settle throughput
            # (bench/throughput.py), while this costs one call per batch.
            pgtrigger.Trigger(
                name="uj_job_state_machine",
                level=pgtrigger.Statement,
                when=pgtrigger.After,
                operation=pgtrigger.Update,
                referencing=pgtrigger.Referencing(old="old_rows", new="new_rows"),
                func=_STATE_MACHINE_SQL,
            )
        ]
        permissions = [
            ("retry_job", "Can retry jobs"),
            ("cancel_job", "Can cancel jobs"),
            ("promote_job", "Can run waiting jobs now"),
            ("remove_job", "Can remove jobs"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id} ({self.state})"


class Step(models.Model):
    """A durable step record of one run: completed steps replay from here."""

    id = models.BigAutoField(primary_key=True)
    run_id = models.UUIDField()
    name = models.TextField()
    status = models.TextField()
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    attempts = models.IntegerField(db_default=1)
    started_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    event = models.TextField(null=True, blank=True)
    correlation_key = models.TextField(null=True, blank=True)
    snapshot = models.TextField(null=True, blank=True)
    """The database snapshot a wait began under (``pg_snapshot`` text)."""
    cursor_at = models.DateTimeField(null=True, blank=True)
    cursor_id = models.UUIDField(null=True, blank=True)
    """With ``cursor_at``: the last event a wait refused; later ones only."""

    class Meta:
        db_table = "ultimate_jobs_step"
        constraints = [
            models.UniqueConstraint("run_id", "name", name="uj_step_run_name_uniq")
        ]
        indexes = [
            models.Index(
                "event",
                "correlation_key",
                name="uj_step_waiting_idx",
                condition=Q(status="waiting"),
            ),
            # The waits that took an event (the events page).
            models.Index(
                "cursor_id",
                name="uj_step_matched_idx",
                condition=Q(status="completed", cursor_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class Event(models.Model):
    """A published event, matched by waiting steps until it expires."""

    id = models.UUIDField(primary_key=True)
    name = models.TextField()
    payload = models.JSONField(null=True, blank=True)
    correlation_key = models.TextField(null=True, blank=True)
    published_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    xact = TransactionIdField(null=True, blank=True)
    """The publishing transaction: a wait matches what its snapshot could not see."""

    class Meta:
        db_table = "ultimate_jobs_event"
        indexes = [
            models.Index("name", "published_at", name="uj_event_lookup_idx"),
            models.Index("expires_at", name="uj_event_expiry_idx"),
            # A wait's candidates: events whose transaction is at or past its
            # snapshot's xmin (everything older was visible when it began).
            models.Index("name", "xact", name="uj_event_xact_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id}"


class Lease(models.Model):
    """A fleet-wide slot (concurrency caps) or a lock, with a fencing number."""

    id = models.BigAutoField(primary_key=True)
    lease_key = models.TextField()
    slot = models.IntegerField(db_default=0)
    holder = models.TextField()
    fence = models.BigIntegerField()
    """From the ``ultimate_jobs_lease_fence`` sequence (migration 0010): every
    grant's number is greater than every earlier grant's."""
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "ultimate_jobs_lease"
        constraints = [
            models.UniqueConstraint("lease_key", "slot", name="uj_lease_key_slot_uniq")
        ]
        indexes = [models.Index("expires_at", name="uj_lease_expiry_idx")]

    def __str__(self) -> str:
        return f"{self.lease_key}#{self.slot} held by {self.holder}"


class QueuePause(models.Model):
    """A paused queue or cron task: a row, never a column on job rows."""

    id = models.BigAutoField(primary_key=True)
    kind = models.TextField(choices=[("queue", "queue"), ("task", "task")])
    name = models.TextField()
    paused_at = models.DateTimeField()

    class Meta:
        db_table = "ultimate_jobs_queue_pause"
        constraints = [
            models.UniqueConstraint("kind", "name", name="uj_pause_kind_name_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} paused"


class Worker(models.Model):
    """One running worker process, announced every heartbeat; rows expire."""

    id = models.TextField(primary_key=True)
    host = models.TextField()
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.IntegerField()
    in_flight = models.JSONField(default=list)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "ultimate_jobs_worker"

    def __str__(self) -> str:
        return self.id


class JobCounter(models.Model):
    """Per job name and queue outcome counts in time buckets, written by settles.

    ``pickups`` counts the settled attempts whose pickup latency (due to
    claimed) adds up in ``pickup_ms``. Rows written before the queue was
    kept carry the queue ``""``.
    """

    id = models.BigAutoField(primary_key=True)
    job = models.TextField()
    queue = models.TextField(db_default="")
    bucket_ms = models.IntegerField()
    bucket_start = models.DateTimeField()
    done = models.IntegerField(db_default=0)
    retried = models.IntegerField(db_default=0)
    failed = models.IntegerField(db_default=0)
    dead = models.IntegerField(db_default=0)
    duration_ms = models.BigIntegerField(db_default=0)
    pickups = models.IntegerField(db_default=0)
    pickup_ms = models.BigIntegerField(db_default=0)

    class Meta:
        db_table = "ultimate_jobs_job_counter"
        constraints = [
            models.UniqueConstraint(
                "job",
                "queue",
                "bucket_ms",
                "bucket_start",
                name="uj_counter_bucket_queue_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.job} @ {self.bucket_start}"


class CronTask(models.Model):
    """A declared cron task's durable state: the watermark fences every fire.

    ``watermark`` is the last occurrence the scheduler handled (fired, or
    dropped by the catch-up policy); an occurrence fires only by moving it
    forward in the same statement that inserts the occurrence's jobs.
    """

    name = models.TextField(primary_key=True)
    cron = models.TextField()
    tz = models.TextField()
    watermark = models.DateTimeField()
    last_occurrence = models.DateTimeField(null=True, blank=True)
    """The occurrence fired last (``None`` until the first fire)."""
    fired_at = models.DateTimeField(null=True, blank=True)
    """When that occurrence was fired (the database clock)."""
    next_run_at = models.DateTimeField(null=True, blank=True)
    """The next occurrence after the watermark, as of the last write."""
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_cron_task"

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} {self.tz})"


class Backfill(PassRecord):
    """One declared ``backfill(...)``'s progress: a row per name.

    Written by its pass (the start, each page in the page's own step
    transaction, the end) and by an operator's pause or resume. ``cursor``
    is the primary key of the last row done (JSON: a number or a string);
    a pass resumed after a pause starts after it. The fields are
    :class:`~django_ultimate_jobs.keyset.models.PassRecord`'s.
    """

    name = models.TextField(primary_key=True)

    class Meta:
        db_table = "ultimate_jobs_backfill"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"backfill {self.name} ({self.state})"


class OutboxMessage(models.Model):
    """A job staged in the caller's transaction, published after it commits.

    Lives in ``ULTIMATE_JOBS["OUTBOX_DATABASE"]`` (the business data's
    database); the job it becomes lives in ``ULTIMATE_JOBS["DATABASE"]``.
    The row holds what a direct enqueue would insert, under the id the job
    will have: a second publish of the message meets that job and inserts
    nothing. Written by raw SQL (``drivers/postgres/sql/outbox.sql``); the model is
    for the migration and the read-only admin page.
    """

    id = models.UUIDField(primary_key=True)
    """The future job's id (UUIDv7: id order is stage order within a transaction)."""
    run_id = models.UUIDField()
    name = models.TextField()
    queue = models.TextField()
    input = models.JSONField()
    idempotency_key = models.TextField(null=True, blank=True)
    tenant_id = models.TextField(null=True, blank=True)
    priority = models.SmallIntegerField(db_default=0)
    max_attempts = models.IntegerField(db_default=3)
    run_at = models.DateTimeField(null=True, blank=True)
    """Due time, fixed at stage (a delay counts from staging); null: due at publish."""
    enqueued_by = models.TextField(null=True, blank=True)
    traceparent = models.TextField(null=True, blank=True)
    extra = models.JSONField(null=True, blank=True)
    """Any other field of the enqueue request, carried to the publish as is."""
    staged_at = models.DateTimeField(db_default=Now())
    """The staging transaction's time: one transaction's messages share it."""
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.TextField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    attempts = models.IntegerField(db_default=0)
    """Publishes of this message that failed."""
    last_error = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "ultimate_jobs_outbox"
        verbose_name = "outbox message"
        indexes = [
            # The relay's claim: unpublished rows in stage order.
            models.Index(
                "staged_at",
                "id",
                name="uj_outbox_pending_idx",
                condition=Q(published_at__isnull=True),
            ),
            # The retention sweep: published rows, oldest first.
            models.Index(
                "published_at",
                name="uj_outbox_published_idx",
                condition=Q(published_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id}"
