"""The claim's rows are decoded with psycopg's own timestamptz loader.

The driver swaps Django's Python loader for psycopg's (C) one on its hot-path
cursors when both zones are UTC (``_fast_loaders``, issue 16): a claimed job
must carry exactly the datetimes Django reads for the same row, with the very
same tzinfo object, or code comparing them (lease checks, steps measuring
from ``claimed_at``) would change behaviour.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from datetime import UTC

import pytest
from django.db import connection

from django_ultimate_jobs.drivers.base import ClaimedJob, ClaimOptions
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.registry import get_job

pytestmark = pytest.mark.postgres


def _claim(queue: str, limit: int) -> list[ClaimedJob]:
    options = ClaimOptions(
        queues=(queue,), limit=limit, worker_id="w", visibility_ms=30_000
    )
    return PostgresDriver().claim(options).claimed


def test_claimed_times_are_the_datetimes_django_reads(transactional_db):
    handle = get_job("tests.noop")
    enqueued = handle.enqueue()
    claimed = _claim(handle.queue, 1)
    row = Job.objects.get(pk=enqueued.id)

    assert [job.id for job in claimed] == [enqueued.id]
    assert claimed[0].claimed_at == row.claimed_at
    assert claimed[0].visible_at == row.visible_at
    assert claimed[0].claimed_at.tzinfo is row.claimed_at.tzinfo is UTC
    assert connection.timezone is UTC  # the case the fast loader serves


def test_after_a_session_zone_change_claimed_times_are_still_django_s(
    transactional_db,
):
    # The kept cursor is keyed by the session's zone: after a SET TIME ZONE
    # on the same connection it must not keep psycopg's loader (which would
    # answer the session's zone), but read what Django's cursors read.
    handle = get_job("tests.noop")
    handle.enqueue()
    _claim(handle.queue, 1)  # the UTC cursor is kept
    enqueued = handle.enqueue()
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Tokyo'")
    try:
        claimed = _claim(handle.queue, 1)
        row = Job.objects.get(pk=enqueued.id)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")

    assert [job.id for job in claimed] == [enqueued.id]
    assert claimed[0].claimed_at == row.claimed_at
    assert claimed[0].claimed_at.tzinfo is row.claimed_at.tzinfo


def test_a_claimed_job_is_the_dataclass_the_row_describes(transactional_db):
    # ClaimedJob is built by rows.row_builder (slots set through descriptors,
    # not __init__): it must equal the one __init__ builds from the row, and
    # two empty inputs must be two dicts (a handler may mutate its input).
    handle = get_job("tests.noop")
    first, second = handle.enqueue().id, handle.enqueue().id
    claimed = _claim(handle.queue, 2)
    rows = {row.id: row for row in Job.objects.filter(pk__in=[first, second])}

    assert sorted(job.id for job in claimed) == sorted([first, second])
    for job in claimed:
        row = rows[job.id]
        assert job == ClaimedJob(
            id=row.id,
            name=row.name,
            queue=row.queue,
            input=row.input,
            idempotency_key=row.idempotency_key,
            run_id=row.run_id,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            priority=row.priority,
            tenant_id=row.tenant_id,
            claimed_by="w",
            claims=row.claims,
            visible_at=row.visible_at,
            enqueued_by=row.enqueued_by,
            traceparent=row.traceparent,
            claimed_at=row.claimed_at,
            run_at=row.run_at,
            retaken=False,
            start_recorded=False,
        )
        assert replace(job, retaken=True).retaken  # a plain frozen dataclass
    assert claimed[0].input == {} and claimed[0].input is not claimed[1].input
    with pytest.raises(FrozenInstanceError):
        claimed[0].name = "other"  # type: ignore[misc]
