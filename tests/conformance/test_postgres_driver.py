"""The conformance suite on the Postgres driver, plus what only it can hold."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers.base import EnqueueRequest
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.models import JobCounter, Step
from django_ultimate_jobs.testing.conformance import COUNTER_FIELDS, DriverConformance

pytestmark = pytest.mark.postgres


class TestPostgresDriver(DriverConformance):
    """Every conformance check, on PostgreSQL (each test rolled back)."""

    @pytest.fixture
    def clock(self):
        return ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))

    @pytest.fixture
    def driver(self, db, clock):
        driver = PostgresDriver(clock=clock)
        yield driver
        driver.close()

    @pytest.fixture
    def put_step(self, db):
        def put(run_id, name, started_at):
            Step.objects.create(
                run_id=run_id, name=name, status="completed", started_at=started_at
            )

        return put

    @pytest.fixture
    def step_names(self, db):
        def names(run_id):
            steps = Step.objects.filter(run_id=run_id)
            return set(steps.values_list("name", flat=True))

        return names

    @pytest.fixture
    def counters(self, db):
        def read(job):
            rows = JobCounter.objects.filter(job=job).order_by("bucket_start")
            return {
                (row.bucket_ms, row.bucket_start): {
                    name: getattr(row, name) for name in COUNTER_FIELDS
                }
                for row in rows
            }

        return read


def test_unknown_stored_state_refused(db):
    """A row in a state this build does not know is refused on read."""
    driver = PostgresDriver()
    enqueued = driver.enqueue(EnqueueRequest(name="unknown.state", input={}))
    with connection.cursor() as cursor:
        # The state-machine trigger refuses unknown transitions; replica
        # mode skips triggers for this one statement (SET LOCAL, inside the
        # test's transaction, which is rolled back).
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE ultimate_jobs_job SET state = 'exploded' WHERE id = %s",
            [enqueued.id],
        )
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")
    with pytest.raises(JobsError) as info:
        driver.get(enqueued.id)
    assert info.value.code == "X_JOB_ROW_STATUS_UNKNOWN"
