"""Reads of job rows and effects, for tests that watch subprocess workers.

Each read runs in the test's autocommit connection, so it sees what the
workers committed a moment ago.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.db import connection

from django_ultimate_jobs.models import Job
from tests.jobsapp.models import Effect

__all__ = ["db_now", "effects_of", "job_row", "state_of"]


def job_row(job_id: UUID) -> Job:
    """The job row as it is now."""
    return Job.objects.get(id=job_id)


def state_of(job_id: UUID) -> str:
    """The job's state as it is now."""
    return Job.objects.values_list("state", flat=True).get(id=job_id)


def effects_of(job_id: UUID, kind: str | None = None) -> list[Effect]:
    """The job's effects in database-clock order."""
    rows = Effect.objects.filter(job_id=job_id)
    if kind is not None:
        rows = rows.filter(kind=kind)
    return list(rows.order_by("at", "id"))


def db_now() -> datetime:
    """The database clock (I-CLOCK: every time comparison uses it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]
