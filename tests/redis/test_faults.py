"""Faults against real processes on the Redis driver: a worker SIGKILLed
mid-job, a ``redis-server`` restarted under load, each worker role's
connection killed (``CLIENT KILL``). Judged by the job rows in Redis."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobsapp.jobs import hang
from tests.support.rows import effects_of
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.redis]

PICKUP_S = 20.0


def _state_is(driver, job_id, state: str):
    def reached() -> bool:
        row = driver.get(job_id)
        return row is not None and row.state == state

    reached.__name__ = f"job_{job_id}_is_{state}"
    return reached


def test_sigkill_mid_job_runs_again_after_its_lease_attempt_2(
    redis_driver, redis_fleet, tmp_path: Path
):
    flag = tmp_path / "hold"
    flag.write_text("hold")
    job_id = hang.enqueue(flag=str(flag)).id
    first = redis_fleet.start(name="first")

    def started() -> bool:
        return any(e.claims == 1 for e in effects_of(job_id, "start"))

    wait_until(started, PICKUP_S, message=redis_fleet.logs)
    first.kill()
    row = redis_driver.get(job_id)
    assert (row.state, row.attempt, row.claims) == ("running", 1, 1)
    flag.unlink()
    redis_fleet.start(name="second")
    wait_until(
        _state_is(redis_driver, job_id, "done"), PICKUP_S, message=redis_fleet.logs
    )
    row = redis_driver.get(job_id)
    assert (row.attempt, row.claims, row.claimed_by) == (2, 2, None)
    assert [e.claims for e in effects_of(job_id, "start")] == [1, 2]
