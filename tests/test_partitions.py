"""Partition maintenance: the right partitions exist after every daily run.

The test app's ``Visit`` table is range-partitioned by ``at`` (migration
``tests/jobsapp/migrations/0002_visit.py``, made by CreatePartitionedModel)
and declared ``partitioned(Visit, by="at", interval="day", ahead=3,
retain=7)``. Maintenance runs with an explicit ``now``: a year of days is
simulated without waiting for one. DDL is transactional in PostgreSQL, so
each test's partitions roll back with it.
"""

from __future__ import annotations

import dataclasses
import io
import uuid
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from django_ultimate_jobs import maintain_partitions, partitioned
from django_ultimate_jobs.errors import DbLockTimeout, PartitionInvalid
from django_ultimate_jobs.maintenance.partitions import (
    PartitionSpec,
    registered_partitions,
)
from django_ultimate_jobs.maintenance.periods import period_start, shift
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.testing import run_jobs
from tests.jobsapp.models import Effect, Visit

pytestmark = pytest.mark.postgres

START = datetime(2030, 1, 1, 3, 17, tzinfo=UTC)


@pytest.fixture
def visit_spec() -> PartitionSpec:
    (spec,) = [s for s in registered_partitions() if s.model is Visit]
    return spec


def partitions_of(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass",
            [table],
        )
        return {name for (name,) in cursor.fetchall()}


def expected(spec: PartitionSpec, first_run: datetime, now: datetime) -> set[str]:
    """Periods from the first run's (or `retain` back) to `ahead` past now's."""
    current = period_start(now.date(), spec.interval)
    oldest = max(
        period_start(first_run.date(), spec.interval),
        shift(current, spec.interval, -spec.retain),
    )
    names, start = set(), oldest
    while start <= shift(current, spec.interval, spec.ahead):
        names.add(spec.partition_name(start))
        start = shift(start, spec.interval, 1)
    return names


@pytest.mark.parametrize(
    ("interval", "ahead", "retain"),
    [("day", 3, 7), ("week", 2, 4), ("month", 3, 6)],
)
def test_a_year_of_daily_runs_keeps_exactly_the_right_partitions(
    db, visit_spec, interval, ahead, retain
):
    """Every day for a year: current + `ahead` exist, older than `retain` are gone,
    and a second run at the same instant changes nothing."""
    spec = dataclasses.replace(
        visit_spec, interval=interval, ahead=ahead, retain=retain
    )
    created = dropped = 0
    for day in range(366):
        now = START + timedelta(days=day)
        (plan,) = maintain_partitions(now, specs=[spec])
        created, dropped = created + len(plan.create), dropped + len(plan.drop)
        assert partitions_of(spec.table) == expected(spec, START, now), now
        (again,) = maintain_partitions(now, specs=[spec])
        assert not again.changes, now
    assert dropped > 0
    assert created - dropped == len(partitions_of(spec.table))


def test_rows_land_in_the_partition_of_their_day(db, visit_spec):
    """A visit written at an instant is stored in that UTC day's partition."""
    maintain_partitions(START, specs=[visit_spec])
    for at in (START, START + timedelta(days=3, hours=20, minutes=42)):
        Visit.objects.create(at=at, path="/x")
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM jobsapp_visit ORDER BY at")
        assert [row[0] for row in cursor.fetchall()] == [
            "jobsapp_visit_p20300101",
            "jobsapp_visit_p20300104",
        ]


def test_a_dropped_partition_takes_its_rows_with_it(db, visit_spec):
    """Rows older than `retain` periods go with their partition; newer ones stay."""
    maintain_partitions(START, specs=[visit_spec])
    Visit.objects.create(at=START, path="/old")
    Visit.objects.create(at=START + timedelta(days=3), path="/new")
    maintain_partitions(START + timedelta(days=8), specs=[visit_spec])
    assert list(Visit.objects.values_list("path", flat=True)) == ["/new"]


def test_dry_run_plans_without_changing_anything(db, visit_spec):
    """--dry-run answers the plan and runs no DDL."""
    (plan,) = maintain_partitions(START, specs=[visit_spec], dry_run=True)
    assert [p.name for p in plan.create] == [
        f"jobsapp_visit_p203001{d:02d}" for d in (1, 2, 3, 4)
    ]
    assert (plan.create[0].start, plan.create[0].end) == (
        date(2030, 1, 1),
        date(2030, 1, 2),
    )
    assert partitions_of("jobsapp_visit") == set()


def test_backfill_creates_every_period_back_and_drops_nothing(db, visit_spec):
    """From an old instant: every day back to it exists, nothing is dropped."""
    (plan,) = maintain_partitions(
        START, backfill_from=START - timedelta(days=20), specs=[visit_spec]
    )
    assert len(plan.create) == 21 + 3 and plan.drop == []
    (regular,) = maintain_partitions(START, specs=[visit_spec])
    assert len(regular.drop) == 20 - 7 and regular.create == []


def test_partitions_outside_the_naming_scheme_are_left_alone(db, visit_spec):
    """A DEFAULT partition (or any other name) is never dropped."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE jobsapp_visit_other PARTITION OF jobsapp_visit DEFAULT"
        )
    maintain_partitions(START + timedelta(days=400), specs=[visit_spec])
    assert "jobsapp_visit_other" in partitions_of("jobsapp_visit")


def test_the_command_prints_the_plan_and_a_second_run_is_up_to_date(db):
    """manage.py maintain_partitions --now: creates, then reports up to date."""
    out = io.StringIO()
    call_command(
        "maintain_partitions", "--now", "2030-01-01T03:17:00Z", "--dry-run", stdout=out
    )
    assert (
        "would create jobsapp_visit_p20300101 [2030-01-01, 2030-01-02)"
        in out.getvalue()
    )
    call_command("maintain_partitions", "--now", "2030-01-01", stdout=io.StringIO())
    out = io.StringIO()
    call_command("maintain_partitions", "--now", "2030-01-01", stdout=out)
    assert "jobsapp_visit: up to date" in out.getvalue()


def test_the_partitions_job_maintains_every_declared_table(pg_driver, clock):
    """ultimate_jobs.partitions, run by a worker, creates the partitions as of its clock."""
    from django_ultimate_jobs.maintenance.builtin import partitions

    partitions.enqueue()
    (execution,) = run_jobs(queues=["ultimate_jobs"])
    assert execution.outcome == "completed"
    assert execution.result["jobsapp_visit"]["created"] == [
        f"jobsapp_visit_p203001{d:02d}" for d in (1, 2, 3, 4)
    ]
    assert Job.objects.get(name="ultimate_jobs.partitions").state == "done"


def test_a_held_lock_fails_fast_with_a_retryable_code(
    transactional_db, settings, visit_spec
):
    """DDL waits at most PARTITION_LOCK_TIMEOUT, then raises X_DB_LOCK_TIMEOUT."""
    settings.ULTIMATE_JOBS = {"PARTITION_LOCK_TIMEOUT": "100ms"}
    params = connection.get_connection_params()
    with psycopg.connect(**params) as holder:
        holder.execute("LOCK TABLE jobsapp_visit IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(DbLockTimeout) as raised:
            maintain_partitions(START, specs=[visit_spec])
        holder.rollback()
    assert raised.value.code == "X_DB_LOCK_TIMEOUT"
    maintain_partitions(START, specs=[visit_spec])  # a retry succeeds
    assert len(partitions_of("jobsapp_visit")) == 4


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"by": "path"}, "by='path' must name a DateField or DateTimeField"),
        ({"by": "nope"}, "by='nope'"),
        ({"by": "at", "interval": "year"}, "interval must be one of"),
        ({"by": "at", "ahead": -1}, "ahead must be a whole number"),
        ({"by": "at", "retain": 0}, "retain must be a whole number"),
        ({"by": "at", "retain": True}, "retain must be a whole number"),
    ],
)
def test_invalid_declarations_are_refused(options, problem):
    """A bad partitioned(...) raises X_PARTITION_INVALID and registers nothing."""
    before = registered_partitions()
    with pytest.raises(PartitionInvalid, match=problem.replace("(", r"\(")):
        partitioned(Effect, **options)
    assert registered_partitions() == before


def test_a_second_different_declaration_of_one_model_is_refused():
    with pytest.raises(PartitionInvalid, match="declared partitioned twice"):
        partitioned(Visit, by="at", interval="month")
    partitioned(Visit, by="at", interval="day", ahead=3, retain=7)  # the same: fine


def test_a_table_that_is_not_partitioned_is_refused(db, visit_spec):
    """Maintenance of a plain table names the migration operation to use."""
    spec = dataclasses.replace(visit_spec, model=Effect)
    with pytest.raises(PartitionInvalid, match="not partitioned by range"):
        maintain_partitions(START, specs=[spec])


def test_visit_ids_are_unique_per_instant(db, visit_spec):
    """The composite key (visit_id, at) is the primary key Django uses."""
    maintain_partitions(START, specs=[visit_spec])
    visit = Visit.objects.create(at=START, visit_id=uuid.uuid4())
    assert Visit.objects.get(pk=(visit.visit_id, START)).path == "/"


def test_the_command_refuses_a_value_that_is_not_iso(db):
    """--now / --from take ISO 8601; anything else exits 1 before any DDL."""
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not an ISO 8601"):
        call_command(
            "maintain_partitions", "--from", "last tuesday", stdout=io.StringIO()
        )
    assert partitions_of("jobsapp_visit") == set()


def test_the_command_backfills_from_an_old_date(db):
    """--from creates every day back to it (and the usual ones ahead)."""
    call_command(
        "maintain_partitions",
        "--now",
        "2030-01-01",
        "--from",
        "2029-12-30",
        stdout=io.StringIO(),
    )
    days = ["20291230", "20291231", "20300101", "20300102", "20300103", "20300104"]
    assert partitions_of("jobsapp_visit") == {f"jobsapp_visit_p{d}" for d in days}


def test_a_declaration_on_another_key_than_the_tables_is_refused(db, visit_spec):
    """Bounds computed for one column never land on another."""
    spec = dataclasses.replace(visit_spec, by="path", column="path")
    with pytest.raises(PartitionInvalid, match="partitioned on another key"):
        maintain_partitions(START, specs=[spec])
    assert partitions_of("jobsapp_visit") == set()


def test_a_naive_now_is_refused(db, visit_spec):
    """Which day a naive instant falls on depends on the host: refused."""
    from django_ultimate_jobs.errors import JobInputInvalid

    with pytest.raises(JobInputInvalid, match="timezone-aware"):
        maintain_partitions(datetime(2030, 1, 1), specs=[visit_spec])
    assert partitions_of("jobsapp_visit") == set()
