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


def _enqueue_until_acknowledged(driver, tag: str, deadline_s: float = 60.0):
    """``effect.enqueue`` retried until Redis answers; the acknowledged id."""
    import time

    from tests.jobsapp.jobs import effect

    give_up = time.monotonic() + deadline_s
    while True:
        try:
            return effect.enqueue(tag=tag).id
        except Exception:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


def _history(driver, enqueued):
    from tests.jobsapp.models import Effect
    from tests.support.history import EffectRow, check_queue

    done = [job_id for job_id in enqueued if driver.get(job_id).state == "done"]
    effects = [EffectRow.of(e) for e in Effect.objects.filter(job_id__in=enqueued)]
    return check_queue(enqueued, done, effects)


def test_a_redis_restart_under_load_loses_no_acknowledged_job(
    transactional_db, tmp_path: Path
):
    """Own redis-server, AOF on with ``appendfsync everysec``, SIGKILLed and
    started again on the same files while jobs are enqueued and run: every
    job ``enqueue()`` returned for ends ``done``, none ran twice under a
    live claim, and the worker carries on without a restart."""
    from django.db import connection

    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.redis import RedisDriver
    from tests.redis.conftest import redis_worker_env
    from tests.support.redis import own_redis
    from tests.support.workers import WorkerFleet

    with own_redis() as server:
        driver = RedisDriver(server.url, prefix="restart")
        previous = set_driver(driver)
        fleet = WorkerFleet(
            redis_worker_env(connection.settings_dict, server.url, "restart"), tmp_path
        )
        try:
            fleet.start("--concurrency", "4", name="worker")
            enqueued = [
                _enqueue_until_acknowledged(driver, "before") for _ in range(60)
            ]
            server.stop(kill=True)
            server.start()
            enqueued += [
                _enqueue_until_acknowledged(driver, "after") for _ in range(60)
            ]

            def all_done() -> bool:
                return all(driver.get(j).state == "done" for j in enqueued)

            wait_until(all_done, 90, message=fleet.logs)
            history = _history(driver, enqueued)
            assert history.valid, history.summary()
            assert fleet.processes[0].alive  # it carried on, no restart
        finally:
            fleet.kill_all()
            print(fleet.logs())
            set_driver(previous)
            driver.close()


def test_client_kill_of_each_worker_connection_is_recovered(
    transactional_db, tmp_path: Path
):
    """Own redis-server: each connection the worker holds is killed in turn
    (``CLIENT KILL ID``); after each, a new job is still run to ``done``.
    Roles with a session of their own are named ``uj:<role>:...``."""
    import redis
    from django.db import connection

    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.redis import RedisDriver
    from tests.redis.conftest import redis_worker_env
    from tests.support.redis import own_redis
    from tests.support.workers import WorkerFleet

    with own_redis() as server:
        driver = RedisDriver(server.url, prefix="kill")
        previous = set_driver(driver)
        admin = redis.Redis.from_url(server.url, decode_responses=True)
        fleet = WorkerFleet(
            redis_worker_env(connection.settings_dict, server.url, "kill"), tmp_path
        )
        try:
            fleet.start(name="worker")
            first = _enqueue_until_acknowledged(driver, "warm")
            wait_until(
                lambda: driver.get(first).state == "done", PICKUP_S, message=fleet.logs
            )
            # Every connection but the test's own two is the worker's.
            own = {driver.store.client.client_id(), admin.client_id()}
            theirs = [c for c in admin.client_list() if int(c["id"]) not in own]
            names = sorted({c.get("name", "") for c in theirs})
            assert any(n.startswith("uj:listen:") for n in names), names
            for victim in theirs:
                admin.client_kill_filter(_id=victim["id"])
                job_id = _enqueue_until_acknowledged(driver, f"after-{victim['id']}")
                wait_until(
                    lambda job_id=job_id: driver.get(job_id).state == "done",
                    PICKUP_S,
                    message=fleet.logs,
                )
            assert fleet.processes[0].alive
        finally:
            fleet.kill_all()
            print(fleet.logs())
            set_driver(previous)
            admin.close()
            driver.close()
