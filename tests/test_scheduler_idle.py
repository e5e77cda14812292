"""What an idle scheduler costs: its lease, and no table read while nothing is due.

The scheduler sleeps until its next need (the next occurrence, or the
lease's next ask); here a :class:`ManualClock` jumps straight to it, so ten
minutes pass in a few milliseconds while every statement still runs on
PostgreSQL. The budget (upstream's measured figure) is 6 statements a
minute, leader or standby.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_ultimate_jobs import task
from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.crontask import unregister_task
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.worker.scheduler import Scheduler
from tests.jobsapp.jobs import noop

pytestmark = pytest.mark.postgres

START = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
MINUTES = 10
BUDGET_PER_MINUTE = 6


class CountingDriver(PostgresDriver):
    """The Postgres driver, noting the name of every statement it runs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.statements: list[str] = []

    def _rows(self, name, params):
        self.statements.append(name)
        return super()._rows(name, params)


@pytest.fixture
def hourly():
    handle = task(name="tests.cron.idle", cron="0 * * * *", tz="UTC", job=noop)
    yield handle
    unregister_task(handle.name)


def idle_for(clock, minutes, *schedulers):
    """Run each scheduler's rounds as ``run()`` would, jumping the clock over
    the sleeps; answers how many rounds each ran."""
    end = clock.now() + timedelta(minutes=minutes)
    wake_at = {s: clock.now() for s in schedulers}
    rounds = dict.fromkeys(schedulers, 0)
    while True:
        scheduler = min(schedulers, key=wake_at.__getitem__)
        if wake_at[scheduler] >= end:
            return rounds
        clock.set(wake_at[scheduler])
        delay = scheduler.tick()
        assert delay > 0, "a scheduler with nothing due must not spin"
        wake_at[scheduler] = clock.now() + timedelta(seconds=delay)
        rounds[scheduler] += 1


def test_an_idle_leader_and_standby_stay_within_six_statements_a_minute(db, hourly):
    clock = ManualClock(START)
    leader_driver = CountingDriver(clock=clock)
    standby_driver = CountingDriver(clock=clock)
    leader = Scheduler(driver=leader_driver, clock=clock, tasks=lambda: [hourly])
    standby = Scheduler(driver=standby_driver, clock=clock, tasks=lambda: [hourly])
    leader.tick(), standby.tick()  # leader: lease + arming; standby: one ask
    leader_driver.statements.clear()
    standby_driver.statements.clear()
    rounds = idle_for(clock, MINUTES, leader, standby)
    assert leader.lease.leading and not standby.lease.leading
    for driver in (leader_driver, standby_driver):
        assert set(driver.statements) == {"leader_acquire"}
        assert len(driver.statements) <= BUDGET_PER_MINUTE * MINUTES
    assert max(rounds.values()) <= BUDGET_PER_MINUTE * MINUTES + 1


def test_the_leader_wakes_for_the_occurrence_and_reads_only_then(db, hourly):
    """Until 13:00 only the lease; at 13:00 one pause read and one fire."""
    clock = ManualClock(START)
    driver = CountingDriver(clock=clock)
    scheduler = Scheduler(driver=driver, clock=clock, tasks=lambda: [hourly])
    scheduler.tick()
    driver.statements.clear()
    idle_for(clock, 60, scheduler)
    assert [f.occurrence for f in scheduler.fired] == [
        datetime(2030, 1, 1, 13, 0, tzinfo=UTC)
    ]
    others = [s for s in driver.statements if s != "leader_acquire"]
    assert others == ["pause_list", "cron_task_fire"]
