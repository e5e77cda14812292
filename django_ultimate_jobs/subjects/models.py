"""The tables of subject requests: the requests, export parts, the erase audit.

Imported by ``django_ultimate_jobs.models`` (the app's models module),
never by ``django_ultimate_jobs.subjects`` itself, so declaring a subject
touches no model.
"""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ..ids import uuid7

__all__ = ["ErasureRecord", "SubjectExportPart", "SubjectRequest"]

LIVE_REQUEST_STATES = ["pending", "running"]


class SubjectRequest(models.Model):
    """One export or erase of one subject, and how far it got.

    The subject's key is stored only while the request is live (the job
    reads it from here, never from its input) and cleared when it is done;
    ``key_digest`` (an HMAC under ``SECRET_KEY``) still finds the requests
    of a key afterwards without storing it.
    """

    class Kind(models.TextChoices):
        """What the request does."""

        EXPORT = "export"
        ERASE = "erase"

    class State(models.TextChoices):
        """Where a request stands (``failed``: its job gave up)."""

        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid7)
    subject = models.TextField()
    kind = models.TextField(choices=Kind.choices)
    state = models.TextField(choices=State.choices, default=State.PENDING)
    key = models.JSONField(null=True, blank=True)
    """The subject's key while the request is live; ``None`` once it ends."""
    key_digest = models.TextField()
    requested_by = models.TextField()
    """Who asked (the audit's answer to "on whose request")."""
    storage = models.TextField(blank=True, default="")
    """An export's storage alias ('' = the subject's declared storage)."""
    archive = models.TextField(blank=True, default="")
    """The name of an export's archive in its storage."""
    job_id = models.UUIDField(null=True, blank=True)
    run_id = models.UUIDField(null=True, blank=True)
    rows_done = models.BigIntegerField(default=0)
    pages_done = models.IntegerField(default=0)
    total = models.BigIntegerField(null=True, blank=True)
    """Rows the request expects to handle, counted when it starts."""
    summary = models.JSONField(null=True, blank=True)
    """Per table (export) or per model and field (erase): what was done."""
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_subject_request"
        ordering = ["-created_at"]
        constraints = [
            # One live export and one live erase per subject key: a second
            # request meets the first instead of racing it.
            models.UniqueConstraint(
                "subject",
                "kind",
                "key_digest",
                name="uj_subject_request_live_uniq",
                condition=Q(state__in=LIVE_REQUEST_STATES),
            )
        ]
        indexes = [models.Index("key_digest", name="uj_subject_request_key_idx")]

    def __str__(self) -> str:
        return f"{self.kind} of {self.subject} ({self.state})"


class SubjectExportPart(models.Model):
    """One page of an export (NDJSON), kept until the archive is stored."""

    id = models.BigAutoField(primary_key=True)
    request = models.ForeignKey(
        SubjectRequest, on_delete=models.CASCADE, related_name="parts"
    )
    table = models.SmallIntegerField()
    page = models.IntegerField()
    rows = models.IntegerField()
    body = models.TextField()

    class Meta:
        db_table = "ultimate_jobs_subject_export_part"
        constraints = [
            models.UniqueConstraint(
                "request", "table", "page", name="uj_subject_part_page_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"part {self.table}.{self.page} of {self.request_id}"


class ErasureRecord(models.Model):
    """What one page of an erase did to one field: never the data.

    Inserted in the page's own transaction, so the records sum to exactly
    what was erased; append-only in the database (a row trigger refuses
    UPDATE and DELETE, raw SQL included).
    """

    id = models.BigAutoField(primary_key=True)
    request = models.ForeignKey(
        SubjectRequest, on_delete=models.PROTECT, related_name="erasures"
    )
    subject = models.TextField()
    model = models.TextField()
    """``app_label.ModelName``."""
    field = models.TextField()
    """The field rewritten; ``*`` for rows deleted whole."""
    policy = models.TextField()
    """``null``, ``empty``, ``redact``, ``value``, ``expression``, ``delete``,
    ``delete (cascade)`` or ``retain: <reason>`` (rows counted, kept)."""
    rows = models.BigIntegerField()
    requested_by = models.TextField()
    sweep = models.BooleanField(default=False)
    """Found by the final sweep: written while the erase ran."""
    recorded_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_erasure_record"
        ordering = ["id"]
        triggers = [
            pgtrigger.Protect(
                name="uj_erasure_record_append_only",
                operation=pgtrigger.Update | pgtrigger.Delete,
            )
        ]

    def __str__(self) -> str:
        return f"{self.model}.{self.field}: {self.policy}, {self.rows} rows"
