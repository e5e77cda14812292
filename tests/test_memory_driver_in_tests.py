"""The memory driver as users' tests use it: settings, enqueue, run_jobs()."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import override_settings

from django_ultimate_jobs import Retry, job
from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers import get_driver, set_driver
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.testing import run_jobs

ran: list[int] = []


@job(name="tests.memory.record", queue="memory", retry=Retry(attempts=2, delay="1m"))
def record(ctx, *, n: int):
    ran.append(n)
    if n < 0:
        raise ValueError("negative")
    return n * 10


@pytest.fixture(autouse=True)
def _clean():
    ran.clear()
    yield
    set_driver(None)


def test_the_memory_setting_installs_the_memory_driver():
    """ULTIMATE_JOBS = {"DRIVER": "memory"} needs no database at all."""
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory"}):
        assert isinstance(get_driver(), MemoryDriver)
        enqueued = record.enqueue(n=1)
        (execution,) = run_jobs(queues=["memory"])
        assert execution.outcome == "completed" and execution.result == 10
        assert get_driver().get(enqueued.id).state == "done"
    assert ran == [1]


def test_a_manual_clock_moves_retries_due():
    """With a ManualClock the retry waits until the test advances time."""
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    set_driver(MemoryDriver(clock=clock))
    enqueued = record.enqueue(n=-1)
    assert [e.outcome for e in run_jobs(queues=["memory"])] == ["retried"]
    assert run_jobs(queues=["memory"]) == []
    clock.advance(minutes=2)
    assert [e.outcome for e in run_jobs(queues=["memory"])] == ["dead-lettered"]
    assert get_driver().get(enqueued.id).state == "dead"
    assert ran == [-1, -1]


def test_delayed_jobs_wait_for_the_clock():
    """A delayed job is not due until the clock reaches its run_at."""
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    set_driver(MemoryDriver(clock=clock))
    record.using(delay="1h").enqueue(n=2)
    assert run_jobs(queues=["memory"]) == []
    clock.advance(hours=1)
    assert [e.result for e in run_jobs(queues=["memory"])] == [20]


def teardown_module():
    unregister("tests.memory.record")


def test_runjobs_refuses_the_memory_driver():
    """A worker process would never see the jobs the memory driver holds."""
    from django.core.management import CommandError, call_command

    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory"}):
        for args in (["--burst"], ["--relay-only", "--burst"]):
            with pytest.raises(CommandError, match="X_SETTINGS_INVALID") as refused:
                call_command("runjobs", *args)
            assert "'memory'" in str(refused.value)
