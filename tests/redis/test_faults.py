"""Faults against real processes on the Redis driver: a worker SIGKILLed
mid-job, a ``redis-server`` restarted under load, each worker role's
connection killed (``CLIENT KILL``). Judged by the job rows in Redis."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.jobsapp.jobs import hang
from tests.redis.conftest import (
    admin_client,
    driver_and_fleet,
    enqueue_until_acknowledged,
    queue_history,
    wait_all_done,
)
from tests.support.redis import own_redis
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


def test_a_redis_restart_under_load_loses_no_acknowledged_job(
    transactional_db, tmp_path: Path
):
    """Own redis-server, AOF on with ``appendfsync everysec``, SIGKILLed and
    started again on the same files while jobs are enqueued and run: every
    job ``enqueue()`` returned for ends ``done``, none ran twice under a
    live claim, and the worker carries on without a restart."""
    with (
        own_redis() as server,
        driver_and_fleet(server.url, "restart", tmp_path) as (driver, fleet),
    ):
        fleet.start("--concurrency", "4", name="worker")
        enqueued = [enqueue_until_acknowledged("before") for _ in range(60)]
        server.stop(kill=True)
        server.start()
        enqueued += [enqueue_until_acknowledged("after") for _ in range(60)]
        wait_all_done(driver, enqueued, fleet)
        history = queue_history(driver, enqueued)
        assert history.valid, history.summary()
        assert fleet.processes[0].alive  # it carried on, no restart


def test_client_kill_of_each_worker_connection_is_recovered(
    transactional_db, tmp_path: Path
):
    """Own redis-server: each connection the worker holds is killed in turn
    (``CLIENT KILL ID``); after each, a new job is still run to ``done``.
    Roles with a session of their own are named ``uj:<role>:...``."""
    with (
        own_redis() as server,
        driver_and_fleet(server.url, "kill", tmp_path) as (driver, fleet),
        contextlib.closing(admin_client(server.url)) as admin,
    ):
        fleet.start(name="worker")
        wait_all_done(driver, [enqueue_until_acknowledged("warm")], fleet)
        # Every connection but the test's own two is the worker's.
        own = {driver.store.client.client_id(), admin.client_id()}
        theirs = [c for c in admin.client_list() if int(c["id"]) not in own]
        names = sorted({c.get("name", "") for c in theirs})
        assert any(n.startswith("uj:listen:") for n in names), names
        for victim in theirs:
            admin.client_kill_filter(_id=victim["id"])
            job_id = enqueue_until_acknowledged(f"after-{victim['id']}")
            wait_all_done(driver, [job_id], fleet)
        assert fleet.processes[0].alive
