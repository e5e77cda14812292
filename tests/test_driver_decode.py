"""The claim's rows are decoded with psycopg's own timestamptz loader.

The driver swaps Django's Python loader for psycopg's (C) one on its hot-path
cursors when both zones are UTC (``_fast_loaders``, issue 16): a claimed job
must carry exactly the datetimes Django reads for the same row, with the very
same tzinfo object, or code comparing them (lease checks, steps measuring
from ``claimed_at``) would change behaviour.
"""

from __future__ import annotations

from datetime import UTC

import pytest
from django.db import connection

from django_ultimate_jobs.drivers.base import ClaimOptions
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.registry import get_job

pytestmark = pytest.mark.postgres


def test_claimed_times_are_the_datetimes_django_reads(transactional_db):
    handle = get_job("tests.noop")
    enqueued = handle.enqueue()
    claimed = (
        PostgresDriver()
        .claim(
            ClaimOptions(
                queues=(handle.queue,), limit=1, worker_id="w", visibility_ms=30_000
            )
        )
        .claimed
    )
    row = Job.objects.get(pk=enqueued.id)

    assert [job.id for job in claimed] == [enqueued.id]
    assert claimed[0].claimed_at == row.claimed_at
    assert claimed[0].visible_at == row.visible_at
    assert claimed[0].claimed_at.tzinfo is row.claimed_at.tzinfo is UTC
    assert connection.timezone is UTC  # the case the fast loader serves
