"""Fixtures of the Redis driver's tests: a driver under a prefix of its own,
installed for the test, and ``runjobs`` processes on the same prefix; and
what the fault tests share (an enqueue retried until Redis acknowledges
it, the history check over the job rows in Redis)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.redis import RedisDriver
from tests.acceptance.conftest import HEARTBEAT, VISIBILITY
from tests.support.redis import drop_prefix, fresh_prefix, require_redis
from tests.support.waiting import retry_until
from tests.support.workers import WorkerFleet, subprocess_env


@pytest.fixture
def redis_url() -> str:
    """The shared test server (the test fails when none answers)."""
    return require_redis()


@pytest.fixture
def prefix(redis_url):
    """A key prefix of this test's own, deleted after it."""
    name = fresh_prefix()
    yield name
    drop_prefix(redis_url, name)


@pytest.fixture
def redis_driver(redis_url, prefix):
    """The Redis driver on this test's prefix, installed as the process's."""
    driver = RedisDriver(redis_url, prefix=prefix)
    previous = set_driver(driver)
    yield driver
    set_driver(previous)
    driver.close()


def redis_worker_env(settings_dict, url: str, prefix: str) -> dict[str, str]:
    """A ``runjobs`` subprocess's environment on the Redis driver."""
    return {
        **subprocess_env(settings_dict),
        "UJ_VISIBILITY": VISIBILITY,
        "UJ_HEARTBEAT": HEARTBEAT,
        "UJ_REDIS_URL": url,
        "UJ_REDIS_PREFIX": prefix,
    }


@pytest.fixture
def redis_fleet(transactional_db, redis_url, prefix, tmp_path):
    """``runjobs`` processes on the Redis driver; all killed after the test."""
    from django.db import connection

    workers = WorkerFleet(
        redis_worker_env(connection.settings_dict, redis_url, prefix), tmp_path
    )
    try:
        yield workers
    finally:
        workers.kill_all()
        print(workers.logs())


def enqueue_until_acknowledged(tag: str, deadline_s: float = 60.0, **kwargs):
    """``effect.enqueue`` retried until Redis answers; the acknowledged id.

    A refused enqueue may still have written its job (a failover cut the
    answer off, too few replicas confirmed it): only an id it returned is
    one the test may hold Redis to.
    """
    from tests.jobsapp.jobs import effect

    return retry_until(lambda: effect.enqueue(tag=tag, **kwargs).id, deadline_s)


def queue_history(driver, enqueued):
    """The history checker's verdict: rows in Redis, effects in PostgreSQL."""
    from tests.jobsapp.models import Effect
    from tests.support.history import EffectRow, check_queue

    done = [job_id for job_id in enqueued if driver.get(job_id).state == "done"]
    effects = [EffectRow.of(e) for e in Effect.objects.filter(job_id__in=enqueued)]
    return check_queue(enqueued, done, effects)


@contextlib.contextmanager
def driver_and_fleet(
    url: str, prefix: str, log_dir, env: dict[str, str] | None = None, **options
) -> Iterator[tuple[RedisDriver, WorkerFleet]]:
    """The Redis driver at ``url`` (``options``: its keyword arguments),
    installed for the block, and ``runjobs`` processes on it (``env`` added
    to theirs), all killed and closed after it."""
    from django.db import connection

    driver = RedisDriver(url, prefix=prefix, **options)
    previous = set_driver(driver)
    fleet = WorkerFleet(
        {**redis_worker_env(connection.settings_dict, url, prefix), **(env or {})},
        log_dir,
    )
    try:
        yield driver, fleet
    finally:
        fleet.kill_all()
        print(fleet.logs())
        set_driver(previous)
        driver.close()


def admin_client(url: str):
    """A plain client of the test's own (``CLIENT LIST``, ``CLIENT KILL``)."""
    import redis

    return redis.Redis.from_url(url, decode_responses=True)


def wait_all_done(driver, ids, fleet, timeout: float = 90.0) -> None:
    """Wait until every job of ``ids`` is ``done`` in Redis (the fleet's
    logs and the states reached so far on failure)."""
    from tests.support.waiting import wait_until

    def states() -> str:
        counts: dict[tuple, int] = {}
        for job_id in ids:
            row = driver.get(job_id)
            key = None if row is None else (row.state, row.attempt, row.claims)
            counts[key] = counts.get(key, 0) + 1
        return f"(state, attempt, claims) counts: {counts}\n{fleet.logs()}"

    def all_done() -> bool:
        return all(
            (row := driver.get(job_id)) is not None and row.state == "done"
            for job_id in ids
        )

    all_done.__name__ = f"{len(ids)}_jobs_done"
    wait_until(all_done, timeout, message=states)
