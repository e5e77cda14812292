"""The scheduler on both drivers: arming, exactly-once fires, catch-up, pauses.

Time is a :class:`ManualClock` shared by the driver and the scheduler, so an
hour of occurrences passes in milliseconds; the Postgres cases run every
statement against the real database.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from django_ultimate_jobs import task
from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.crontask import unregister_task
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.cron import TaskFire
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.worker.scheduler import Scheduler
from tests.jobsapp.jobs import charge, noop

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock():
    return ManualClock(START)


@pytest.fixture
def postgres_driver(db, clock):
    return PostgresDriver(clock=clock)


@pytest.fixture
def memory_driver(clock):
    return MemoryDriver(clock=clock)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=[pytest.mark.django_db, pytest.mark.postgres]),
        "memory",
    ]
)
def driver(request):
    built = request.getfixturevalue(f"{request.param}_driver")
    previous = set_driver(built)
    yield built
    set_driver(previous)
    built.close()


@pytest.fixture
def declare():
    """Declare tasks for one test; each is unregistered afterwards."""
    names: list[str] = []

    def make(name="tests.cron.minutely", cron="* * * * *", **options):
        options.setdefault("job", noop)
        if "enqueue" in options:
            options.pop("job")
        handle = task(name=name, cron=cron, tz=options.pop("tz", "UTC"), **options)
        names.append(handle.name)
        return handle

    yield make
    for name in names:
        unregister_task(name)


def scheduler_for(driver, clock, *handles, holder=None):
    return Scheduler(driver=driver, clock=clock, tasks=lambda: handles, holder=holder)


def stored_jobs(driver, name="tests.noop"):
    """(key, run_at) of every stored job of ``name``, read from the store."""
    if isinstance(driver, MemoryDriver):
        rows = [r for r in driver._jobs.rows.values() if r.name == name]
        return sorted((r.idempotency_key, r.run_at) for r in rows)
    from django_ultimate_jobs.models import Job

    return sorted(
        Job.objects.filter(name=name).values_list("idempotency_key", "run_at")
    )


def watermark(driver, name):
    (record,) = [t for t in driver.cron.task_list() if t.name == name]
    return record.watermark


def test_a_new_task_arms_at_its_next_occurrence(driver, clock, declare):
    """Nothing fires for the past; the next minute fires once, keyed and due then."""
    handle = declare()
    scheduler = scheduler_for(driver, clock, handle)
    clock.advance(seconds=30)
    scheduler.tick()
    assert stored_jobs(driver) == []
    clock.advance(seconds=30)
    scheduler.tick()
    scheduler.tick()
    occurrence = START + timedelta(minutes=1)
    assert stored_jobs(driver) == [
        (f"tests.cron.minutely:{occurrence.isoformat()}:0", occurrence)
    ]
    assert watermark(driver, "tests.cron.minutely") == occurrence
    (fired,) = scheduler.fired
    assert driver.get(fired.job_ids[0]).enqueued_by == "task:tests.cron.minutely"


def test_two_schedulers_that_both_lead_fire_each_occurrence_once(
    driver, clock, declare
):
    """Same holder id, so both believe they lead: the watermark fence decides."""
    handle = declare()
    first = scheduler_for(driver, clock, handle, holder="same")
    second = scheduler_for(driver, clock, handle, holder="same")
    first.tick(), second.tick()
    for _ in range(10):
        clock.advance(minutes=1)
        first.tick()
        second.tick()
    fired = sorted(f.occurrence for f in first.fired + second.fired)
    expected = [START + timedelta(minutes=n) for n in range(1, 11)]
    assert fired == expected
    assert [run_at for _key, run_at in stored_jobs(driver)] == expected


def test_a_stale_fire_moves_nothing_and_inserts_nothing(driver, clock, declare):
    """The fence: a fire presenting an old watermark answers None, writes nothing."""
    handle = declare()
    scheduler_for(driver, clock, handle).tick()
    armed = watermark(driver, handle.name)
    occurrence = START + timedelta(minutes=1)
    clock.set(occurrence)
    fire = TaskFire(
        name=handle.name,
        expected=armed,
        watermark=occurrence,
        occurrence=occurrence,
        next_run_at=None,
        jobs=handle.requests(occurrence),
    )
    assert driver.cron.task_fire(fire) is not None
    assert driver.cron.task_fire(fire) is None
    assert len(stored_jobs(driver)) == 1


@pytest.mark.parametrize(
    ("policy", "fired_minutes", "watermark_minutes"),
    [
        ("skip", [5], 5),
        ("run-once", [1], 5.5),
        ("run-all", [3, 4, 5], 5),
    ],
)
def test_catch_up_after_the_scheduler_was_down(
    driver, clock, declare, policy, fired_minutes, watermark_minutes
):
    """Five missed minutes: skip fires the latest, run-once the earliest, run-all
    the last max_catch_up (3); the next occurrence then fires as usual."""
    handle = declare(catch_up=policy, max_catch_up=3)
    scheduler_for(driver, clock, handle).tick()  # armed at 12:00
    clock.advance(minutes=5, seconds=30)  # down until 12:05:30
    restarted = scheduler_for(driver, clock, handle)
    restarted.tick()
    assert [f.occurrence for f in restarted.fired] == [
        START + timedelta(minutes=m) for m in fired_minutes
    ]
    assert watermark(driver, handle.name) == START + timedelta(
        minutes=watermark_minutes
    )
    clock.set(START + timedelta(minutes=6))
    restarted.tick()
    assert restarted.fired[-1].occurrence == START + timedelta(minutes=6)
    assert len(stored_jobs(driver)) == len(fired_minutes) + 1


def test_a_paused_task_is_skipped_with_its_watermark_untouched(driver, clock, declare):
    """Paused over three occurrences, then resumed: run-all fires what it missed."""
    handle = declare(catch_up="run-all")
    scheduler = scheduler_for(driver, clock, handle)
    scheduler.tick()
    assert [p.name for p in driver.cron.pause_task(handle.name)] == [handle.name]
    for _ in range(3):
        clock.advance(minutes=1)
        scheduler.tick()
    assert stored_jobs(driver) == []
    assert watermark(driver, handle.name) == START
    driver.cron.resume_task(handle.name)
    clock.advance(seconds=5)  # the pause is looked at again after 5 s
    scheduler.tick()
    assert [f.occurrence for f in scheduler.fired] == [
        START + timedelta(minutes=m) for m in (1, 2, 3)
    ]


def test_a_failing_enqueue_callback_leaves_its_watermark_and_others_run(
    driver, clock, declare, caplog
):
    """The broken task is logged and retried later; the healthy one fires."""

    def broken(occurrence):
        raise RuntimeError("boom")

    bad = declare(name="tests.cron.broken", enqueue=broken)
    good = declare(name="tests.cron.good")
    scheduler = scheduler_for(driver, clock, bad, good)
    scheduler.tick()
    clock.advance(minutes=1)
    with caplog.at_level(logging.ERROR, logger="django_ultimate_jobs"):
        scheduler.tick()
    assert [f.task for f in scheduler.fired] == ["tests.cron.good"]
    assert watermark(driver, "tests.cron.broken") == START
    assert "jobs.task.round-failed" in caplog.messages


def test_the_enqueue_callback_gets_the_occurrence_in_the_task_zone(
    driver, clock, declare
):
    """A 09:00 Paris digest is keyed by the local day of the occurrence."""
    handle = declare(
        name="tests.cron.digest",
        cron="0 9 * * *",
        tz="Europe/Paris",
        enqueue=lambda occurrence: [(noop, {"day": occurrence.date().isoformat()})],
    )
    scheduler = scheduler_for(driver, clock, handle)
    scheduler.tick()
    clock.set(datetime(2030, 1, 2, 8, 0, tzinfo=UTC))  # 09:00 in Paris
    scheduler.tick()
    (fired,) = scheduler.fired
    assert driver.get(fired.job_ids[0]).input == {"day": "2030-01-02"}
    (execution,) = run_jobs(queues=["default"], driver=driver)
    assert (execution.claimed.name, execution.landed) == ("tests.noop", True)


def test_a_standby_takes_over_once_the_leader_lease_lapses(driver, clock, declare):
    """The leader stops without releasing (a crash); the standby leads within
    the 30 s TTL plus one 10 s ask, and catches up with run-all."""
    handle = declare(catch_up="run-all")
    leader = scheduler_for(driver, clock, handle, holder="a")
    standby = scheduler_for(driver, clock, handle, holder="b")
    leader.tick(), standby.tick()
    assert leader.lease.leading and not standby.lease.leading
    clock.advance(minutes=1)
    leader.tick()
    for _ in range(8):  # the leader is gone; 40 s pass in 5 s steps
        clock.advance(seconds=5)
        standby.tick()
    assert standby.lease.leading
    clock.set(START + timedelta(minutes=2))
    standby.tick()
    fired = [f.occurrence for f in leader.fired + standby.fired]
    assert fired == [START + timedelta(minutes=1), START + timedelta(minutes=2)]


@pytest.mark.parametrize(
    ("tz", "night_utc", "fixed", "expected_fixed", "expected_interval"),
    [
        (
            "Europe/Paris",
            datetime(2030, 10, 26, 22, 0, tzinfo=UTC),  # 00:00 CEST, 27 October
            "30 2 * * *",
            ["02:30+0200"],
            # 01:00 is the latest occurrence due at the first round (skip).
            [
                "01:00+0200",
                "01:30+0200",
                "02:00+0200",
                "02:30+0200",
                "02:00+0100",
                "02:30+0100",
                "03:00+0100",
                "03:30+0100",
            ],
        ),
        (
            "America/New_York",
            datetime(2030, 3, 10, 5, 0, tzinfo=UTC),  # 00:00 EST, 10 March
            "30 2 * * *",
            ["03:00-0400"],
            [
                "01:00-0500",
                "01:30-0500",
                "03:00-0400",
                "03:30-0400",
                "04:00-0400",
                "04:30-0400",
                "05:00-0400",
                "05:30-0400",
            ],
        ),
    ],
)
def test_the_scheduler_fires_across_a_dst_night(
    driver, clock, declare, tz, night_utc, fixed, expected_fixed, expected_interval
):
    """Rounds every 5 minutes through the night of a change: the fixed-time
    task fires once (first pass, or the end of the gap); the interval task
    fires on every real half hour."""
    clock.set(night_utc)
    daily = declare(name="tests.cron.daily", cron=fixed, tz=tz)
    half_hourly = declare(name="tests.cron.half", cron="*/30 * * * *", tz=tz)
    scheduler = scheduler_for(driver, clock, daily, half_hourly)
    scheduler.tick()
    clock.advance(hours=1, minutes=1)
    for _ in range(45):  # 3 h 45 min of real time from 01:01, 5-minute rounds
        scheduler.tick()
        clock.advance(minutes=5)

    def fired(task_name):
        zone = daily.schedule.zone
        return [
            f.occurrence.astimezone(zone).strftime("%H:%M%z")
            for f in scheduler.fired
            if f.task == task_name
        ]

    assert fired("tests.cron.daily") == expected_fixed
    assert fired("tests.cron.half") == expected_interval


def test_an_occurrence_key_past_the_byte_limit_is_hashed_not_refused(
    driver, clock, declare
):
    """A long task name plus a job key near 512 bytes joined to more than the
    key limit, and every fire was refused. The job-key part is hashed instead:
    each job still gets its own key, and a second fire of the occurrence
    still dedupes."""
    long_key = "k" * 500
    handle = declare(
        name="tests.cron." + "n" * 150,
        enqueue=lambda occurrence: [
            (charge, {"invoice_id": long_key, "org_id": "o1"}),
            (charge, {"invoice_id": long_key + "x", "org_id": "o1"}),
        ],
    )
    scheduler_for(driver, clock, handle).tick()
    clock.advance(minutes=1)
    scheduler = scheduler_for(driver, clock, handle)
    scheduler.tick()
    assert len(scheduler.fired) == 1
    keys = [key for key, _run_at in stored_jobs(driver, name="tests.charge")]
    assert len(keys) == 2 and len(set(keys)) == 2
    assert all(len(key.encode()) <= 512 for key in keys)
    assert all(":sha256:" in key for key in keys)
