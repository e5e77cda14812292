"""The conformance suite on the Redis driver (a real Redis server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers.redis import RedisDriver
from django_ultimate_jobs.drivers.steps import StepRecord
from django_ultimate_jobs.testing.conformance import COUNTER_FIELDS, DriverConformance
from tests.support.redis import drop_prefix, fresh_prefix, require_redis

pytestmark = pytest.mark.redis


class TestRedisDriver(DriverConformance):
    """Every conformance check, on Redis (each test under its own key prefix)."""

    @pytest.fixture
    def clock(self):
        return ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))

    @pytest.fixture
    def driver(self, clock):
        url = require_redis()
        prefix = fresh_prefix()
        driver = RedisDriver(url, prefix=prefix, clock=clock)
        yield driver
        driver.close()
        drop_prefix(url, prefix)

    @pytest.fixture
    def put_step(self, driver):
        def put(run_id, name, started_at):
            record = StepRecord(
                run_id=run_id, name=name, status="completed", started_at=started_at
            )
            driver.steps.put(record, None)

        return put

    @pytest.fixture
    def step_names(self, driver):
        def names(run_id):
            return set(driver.steps.list(run_id))

        return names

    @pytest.fixture
    def counters(self, driver):
        def read(job):
            buckets = driver.counters(job)
            assert all(set(c) == set(COUNTER_FIELDS) for c in buckets.values())
            return buckets

        return read


@pytest.fixture(scope="class")
def replicated_url():
    """A primary of the tests' own with one replica confirming its writes."""
    from tests.support.redis import own_redis, wait_for_replicas

    with (
        own_redis() as primary,
        own_redis("--replicaof", "127.0.0.1", str(primary.port)),
    ):
        wait_for_replicas(primary.url, 1)
        yield primary.url


class TestRedisDriverWaitingForAReplica(TestRedisDriver):
    """Every conformance check again with ``REDIS_WAIT_REPLICAS = 1``: each
    script followed by ``WAIT`` in one pipeline answers as without it."""

    @pytest.fixture
    def driver(self, clock, replicated_url):
        driver = RedisDriver(
            replicated_url, prefix=fresh_prefix(), clock=clock, wait_replicas=1
        )
        yield driver
        driver.close()
