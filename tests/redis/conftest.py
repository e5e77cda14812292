"""Fixtures of the Redis driver's tests: a driver under a prefix of its own,
installed for the test, and ``runjobs`` processes on the same prefix."""

from __future__ import annotations

import pytest

from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.redis import RedisDriver
from tests.acceptance.conftest import HEARTBEAT, VISIBILITY
from tests.support.redis import drop_prefix, fresh_prefix, require_redis
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
