"""The retention sweep: what outlived its window goes, everything else stays.

Rows are written directly with the ages under test; the sweep runs as of the
frozen clock (2030-01-01 12:00 UTC) through the Postgres driver.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection

from django_ultimate_jobs import sweep_retention
from django_ultimate_jobs.drivers.base import ClaimOptions
from django_ultimate_jobs.drivers.postgres.sql import query
from django_ultimate_jobs.errors import JobInputInvalid, SettingsInvalid
from django_ultimate_jobs.maintenance.builtin import retention
from django_ultimate_jobs.maintenance.retention import sweep_target
from django_ultimate_jobs.models import Event, Job, JobCounter, Step
from django_ultimate_jobs.testing import run_jobs

pytestmark = pytest.mark.postgres

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def make_job(
    state: str,
    age: timedelta,
    *,
    steps: int = 0,
    queue: str = "default",
    now: datetime = NOW,
) -> uuid.UUID:
    """A job row last written `age` before `now`, with `steps` step records."""
    job_id = uuid.uuid4()
    Job.objects.create(
        id=job_id,
        name="tests.noop",
        input={},
        run_id=job_id,
        state=state,
        queue=queue,
        updated_at=now - age,
        run_at=now - age,
    )
    for n in range(steps):
        Step.objects.create(
            run_id=job_id, name=f"s{n}", status="completed", started_at=now - age
        )
    return job_id


def ids_left() -> set[uuid.UUID]:
    return set(Job.objects.values_list("id", flat=True))


def test_finished_jobs_past_their_window_go_with_their_steps(pg_driver):
    """done > 1 day and failed/dead/cancelled > 14 days are deleted, steps too."""
    old_done = make_job("done", timedelta(days=1, seconds=1), steps=2)
    young_done = make_job("done", timedelta(hours=23), steps=1)
    old_ended = [
        make_job(s, timedelta(days=15), steps=1)
        for s in ("failed", "dead", "cancelled")
    ]
    young_failed = make_job("failed", timedelta(days=13))
    live = [make_job(s, timedelta(days=90)) for s in ("ready", "delayed", "suspended")]

    report = sweep_retention()

    assert report == {
        "done": 1,
        "failed": 3,
        "steps": 5,
        "events": 0,
        "counters": 0,
        "outbox": 0,
        "locks": 0,
    }
    assert ids_left() == {young_done, young_failed, *live}
    assert set(Step.objects.values_list("run_id", flat=True)) == {young_done}
    assert old_done not in ids_left() and not set(old_ended) & ids_left()


def test_windows_follow_the_retention_setting(pg_driver, settings):
    """RETENTION["done"] / ["failed"] replace the 1 day / 14 days defaults."""
    settings.ULTIMATE_JOBS = {"RETENTION": {"done": "2h", "failed": "3d"}}
    kept = {make_job("done", timedelta(hours=1)), make_job("dead", timedelta(days=2))}
    make_job("done", timedelta(hours=3))
    make_job("dead", timedelta(days=4))
    assert sweep_retention(NOW) == {
        "done": 1,
        "failed": 1,
        "steps": 0,
        "events": 0,
        "counters": 0,
        "outbox": 0,
        "locks": 0,
    }
    assert ids_left() == kept


@pytest.mark.parametrize(
    "retention",
    [{"kept": "1d"}, {"done": "forever"}, {"failed": 0}, "1d"],
)
def test_invalid_retention_settings_are_refused(retention):
    from django_ultimate_jobs.conf import parse_settings

    with pytest.raises(SettingsInvalid):
        parse_settings({"RETENTION": retention})


def test_deletes_run_in_batches_of_the_given_size(pg_driver):
    """With batch=2, five expired rows go in three transactions."""
    from django_ultimate_jobs.drivers.postgres.maintenance import delete_in_batches

    for _ in range(5):
        make_job("done", timedelta(days=2), steps=1)
    batches = list(
        delete_in_batches(
            "default", "job_retention_done", {"before": NOW - timedelta(days=1)}, 2
        )
    )
    assert batches == [(2, 2), (2, 2), (1, 1)]


@pytest.mark.parametrize(
    "arguments", [{"batch": 0}, {"batch": 2.5}, {"now": datetime(2030, 1, 1)}]
)
def test_bad_arguments_are_refused_before_anything_is_deleted(pg_driver, arguments):
    """A batch that is not a count, or a naive now, raises X_JOB_INPUT_INVALID."""
    kept = make_job("done", timedelta(days=30))
    with pytest.raises(JobInputInvalid):
        sweep_retention(**arguments)
    assert ids_left() == {kept}


def test_expired_events_and_old_counter_hours_go(pg_driver):
    """Events past expires_at and 1-hour buckets older than 30 days are deleted."""
    for expires in (NOW - timedelta(seconds=1), NOW + timedelta(days=1)):
        Event.objects.create(
            id=uuid.uuid4(),
            name="e",
            published_at=NOW - timedelta(days=7),
            expires_at=expires,
        )
    for age in (timedelta(days=31), timedelta(days=29)):
        JobCounter.objects.create(
            job="tests.noop", bucket_ms=3_600_000, bucket_start=NOW - age
        )
    report = sweep_retention()
    assert (report["events"], report["counters"]) == (1, 1)
    assert Event.objects.get().expires_at > NOW
    assert JobCounter.objects.get().bucket_start == NOW - timedelta(days=29)


def test_the_retention_job_sweeps_each_target_as_a_step(pg_driver):
    """ultimate_jobs.retention, run by a worker, records one step per target."""
    make_job("done", timedelta(days=3), steps=1)
    enqueued = retention.enqueue()
    assert retention.enqueue().id == enqueued.id  # one live sweep at a time
    (execution,) = run_jobs(queues=["ultimate_jobs"])
    assert execution.outcome == "completed"
    assert execution.result == {
        "done": 1,
        "failed": 0,
        "steps": 1,
        "events": 0,
        "counters": 0,
        "outbox": 0,
        "locks": 0,
    }
    steps = Step.objects.filter(run_id=enqueued.run_id).values_list("name", flat=True)
    assert sorted(steps) == [
        "clock",
        "counters",
        "done",
        "events",
        "failed",
        "locks",
        "outbox",
    ]


def test_the_memory_driver_sweeps_the_same_rows(memory_driver_with_clock):
    """sweep_retention() over the memory driver deletes by the same rules."""
    from django_ultimate_jobs import job

    driver, clock = memory_driver_with_clock
    handle = job(name="tests.retention.memory")(lambda ctx: None)
    try:
        handle.enqueue()
        run_jobs(driver=driver, queues=["default"])
        clock.advance(days=1, seconds=1)
        handle.enqueue()
        run_jobs(driver=driver, queues=["default"])
        assert sweep_retention()["done"] == 1
    finally:
        from django_ultimate_jobs.registry import unregister

        unregister("tests.retention.memory")


@pytest.fixture
def memory_driver_with_clock():
    from django_ultimate_jobs.clock import ManualClock
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.memory import MemoryDriver

    clock = ManualClock(NOW)
    driver = MemoryDriver(clock=clock)
    previous = set_driver(driver)
    yield driver, clock
    set_driver(previous)


@pytest.mark.django_db(transaction=True)
def test_an_open_batch_never_blocks_the_claim():
    """While a batch holds its locks, a claim of a live row returns at once."""
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.postgres import PostgresDriver

    driver = PostgresDriver()
    previous = set_driver(driver)
    try:
        real_now = datetime.now(UTC)
        for _ in range(50):
            make_job("done", timedelta(days=2), steps=1, now=real_now)
        ready = make_job(
            "ready", timedelta(seconds=1), queue="retention-live", now=real_now
        )
        with psycopg.connect(**connection.get_connection_params()) as holder:
            deleted = holder.execute(
                query("job_retention_done", "maintenance.sql"),
                {"before": real_now - timedelta(days=1), "batch": 5000},
            ).fetchone()
            assert deleted == (50, 50)  # the batch's transaction is still open
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '1s'")
            started = time.monotonic()
            claimed = driver.claim(
                ClaimOptions(
                    queues=["retention-live"],
                    limit=5,
                    worker_id="w",
                    visibility_ms=30_000,
                )
            )
            elapsed = time.monotonic() - started
            holder.commit()
        assert [job.id for job in claimed.claimed] == [ready]
        assert elapsed < 0.5
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        set_driver(previous)


def lease_rows(driver, clock) -> None:
    """Lock rows lapsed 2 h ago, 10 min ago, and live; a job slot and the
    leader lease lapsed 2 h ago (never swept)."""
    leases = driver.leases
    assert clock.now() == NOW
    leases.acquire("lock:invoice:1", 1, 1_000, "gone")
    leases.acquire("job:billing.sync", 2, 1_000, "w1:a")
    driver.cron.leader_acquire("ultimate_jobs:scheduler", "scheduler-x", ttl_ms=1_000)
    clock.set(SWEEP - timedelta(minutes=10, seconds=1))
    leases.acquire("lock:invoice:2", 1, 1_000, "recent")
    clock.set(SWEEP)
    leases.acquire("lock:invoice:3", 1, 30_000, "live")


SWEEP = NOW + timedelta(hours=2, seconds=1)
LEFT_AFTER_SWEEP = [
    "job:billing.sync",
    "lock:invoice:2",
    "lock:invoice:3",
    "ultimate_jobs:scheduler",
]


def test_lock_rows_lapsed_an_hour_ago_are_swept_and_nothing_else(pg_driver, clock):
    """One row per invoice:{id} ever locked does not pile up; slots stay."""
    lease_rows(pg_driver, clock)
    assert sweep_target("locks", SWEEP, batch=1) == {"locks": 1}
    assert [r.key for r in pg_driver.leases.records()] == LEFT_AFTER_SWEEP
    assert sweep_retention(SWEEP)["locks"] == 0


def test_the_memory_driver_sweeps_the_same_lock_rows():
    from django_ultimate_jobs.clock import ManualClock
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.memory import MemoryDriver

    clock = ManualClock(NOW)
    driver = MemoryDriver(clock=clock)
    previous = set_driver(driver)
    try:
        lease_rows(driver, clock)
        assert sweep_retention(SWEEP)["locks"] == 1
        assert [r.key for r in driver.leases.records()] == LEFT_AFTER_SWEEP
    finally:
        set_driver(previous)
        driver.close()
