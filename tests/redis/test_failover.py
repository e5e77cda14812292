"""A Redis failover under load, through Sentinel, with ``WAIT`` for a replica.

Real processes: a primary, two replicas and a Sentinel (quorum 1, the
primary down after 1 s), each a ``redis-server`` of the test's own; the
test's driver and a ``runjobs`` find the primary through the Sentinel
(``REDIS_SENTINELS``) and follow every script with ``WAIT 1``
(``REDIS_WAIT_REPLICAS``). The primary is SIGKILLed while jobs are
enqueued and run; the Sentinel promotes a replica and the worker follows
it without a restart. Judged by the job rows in Redis and the effects the
bodies wrote: every job ``enqueue()`` returned for ends ``done``, none ran
twice under a live claim.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from django_ultimate_jobs.drivers.redis.errors import RedisNotReplicated
from tests.redis.conftest import (
    admin_client,
    driver_and_fleet,
    enqueue_until_acknowledged,
    queue_history,
    wait_all_done,
)
from tests.support.redis import (
    RedisSentinel,
    RedisServer,
    own_redis,
    wait_for_replicas,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.redis]

SERVICE = "uj"
WAIT_TIMEOUT_MS = 1000


def _sentinel_options(sentinel: RedisSentinel, replicas: int = 1) -> dict:
    return {
        "sentinels": [("127.0.0.1", sentinel.port)],
        "service": SERVICE,
        "wait_replicas": replicas,
        "wait_timeout_ms": WAIT_TIMEOUT_MS,
    }


def _sentinel_env(sentinel: RedisSentinel, replicas: int = 1) -> dict[str, str]:
    return {
        "UJ_REDIS_SENTINELS": f"127.0.0.1:{sentinel.port}",
        "UJ_REDIS_SERVICE": SERVICE,
        "UJ_REDIS_WAIT_REPLICAS": str(replicas) if replicas else "",
        "UJ_REDIS_WAIT_TIMEOUT": f"{WAIT_TIMEOUT_MS}ms",
    }


@contextlib.contextmanager
def _replicated():
    """A primary with two replicas in sync, and a Sentinel watching it;
    yields the servers by port, and the Sentinel."""
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(own_redis())
        servers = {primary.port: primary}
        for _ in range(2):
            replica = stack.enter_context(
                own_redis("--replicaof", "127.0.0.1", str(primary.port))
            )
            servers[replica.port] = replica
        wait_for_replicas(primary.url, 2)
        sentinel = RedisSentinel(primary.port, SERVICE)
        stack.callback(sentinel.close)
        sentinel.start()

        def replicas_known() -> bool:
            with contextlib.closing(admin_client(sentinel.url)) as admin:
                return len(admin.sentinel_slaves(SERVICE)) == 2

        wait_until(replicas_known, 30)
        yield servers, sentinel


@pytest.mark.parametrize("replicas", [1, 0], ids=["wait-1", "no-wait"])
def test_a_sentinel_failover_under_load_loses_no_acknowledged_job(
    transactional_db, tmp_path: Path, replicas: int
):
    """Every role follows the Sentinel to the new primary: claims and
    settles go on with the worker not restarted, with ``WAIT`` (scripts in a
    pipeline) and without (scripts on the role's own connection, which
    redis-py dialled again at the old primary's address: issue 25, B1)."""
    with (
        _replicated() as (servers, sentinel),
        driver_and_fleet(
            # With Sentinels the URL's host is not used: the primary is
            # whichever server the Sentinel names.
            "redis://sentinel-named-primary/0",
            "failover",
            tmp_path,
            _sentinel_env(sentinel, replicas),
            **_sentinel_options(sentinel, replicas),
        ) as (driver, fleet),
    ):
        worker = fleet.start("--concurrency", "4", name="worker")
        worker.wait_for_output("jobs.wake.live", 60)
        enqueued = [
            enqueue_until_acknowledged("before", sleep_ms=20) for _ in range(80)
        ]
        # Under load: the worker is through part of them, not all.
        wait_all_done(driver, enqueued[:10], fleet)
        seen = len(worker.output())
        # The primary now (on a loaded machine the Sentinel may already have
        # failed over once: that one is a failover too, not the one tested).
        killed = sentinel.primary_port()
        servers[killed].stop(kill=True)
        enqueued += [
            enqueue_until_acknowledged("after", sleep_ms=20) for _ in range(80)
        ]
        assert sentinel.primary_port() != killed  # it failed over

        wait_all_done(driver, enqueued, fleet, timeout=120)
        history = queue_history(driver, enqueued)
        assert history.valid, history.summary()
        assert worker.alive()  # it followed the Sentinel, no restart
        assert "jobs.db.lost" in worker.output()[seen:]  # it met the failover


def test_an_enqueue_no_replica_confirms_is_refused_with_a_code():
    """``WAIT`` answers fewer replicas than asked: ``X_REDIS_NOT_REPLICATED``
    (the primary has the job; the caller is told it could be lost)."""
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.redis import RedisDriver
    from tests.jobsapp.jobs import effect

    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(own_redis())
        replica = RedisServer("--replicaof", "127.0.0.1", str(primary.port))
        stack.callback(replica.close)
        replica.start()
        wait_for_replicas(primary.url, 1)
        driver = RedisDriver(
            primary.url, prefix="unreplicated", wait_replicas=1, wait_timeout_ms=200
        )
        stack.callback(driver.close)
        stack.callback(set_driver, set_driver(driver))
        confirmed = effect.enqueue(tag="confirmed").id
        assert driver.get(confirmed).state == "ready"

        replica.stop(kill=True)
        with pytest.raises(RedisNotReplicated) as refused:
            effect.enqueue(tag="unconfirmed")
        assert refused.value.code == "X_REDIS_NOT_REPLICATED"
        assert refused.value.meta["replicas"] == 0


def test_a_write_to_a_replica_reads_as_redis_being_away():
    """A connection left on a demoted primary meets ``READONLY``: the worker
    roles treat it as an outage (reconnect, retry), not as a failed call."""
    from django_ultimate_jobs.drivers.base import EnqueueRequest
    from django_ultimate_jobs.drivers.redis import RedisDriver

    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(own_redis())
        replica = stack.enter_context(
            own_redis("--replicaof", "127.0.0.1", str(primary.port))
        )
        driver = RedisDriver(replica.url, prefix="readonly")
        stack.callback(driver.close)
        with pytest.raises(Exception) as refused:
            driver.enqueue(EnqueueRequest(name="redis.readonly", input={}))
        assert driver.sessions.is_unavailable(refused.value), repr(refused.value)


def test_a_worker_started_while_the_primary_is_away_waits_and_then_works(
    transactional_db, tmp_path: Path
):
    """With Sentinels the driver is built without asking Redis, and each
    role dials its own connection when its thread starts: with the primary
    away then (a deploy during a failover), each reports the outage and
    dials again later, instead of its thread dying (each did, of
    ``MasterNotFoundError``)."""
    primary = RedisServer()
    sentinel = RedisSentinel(primary.port, SERVICE)
    with contextlib.ExitStack() as stack:
        stack.callback(primary.close)
        stack.callback(sentinel.close)
        primary.start()
        sentinel.start()
        driver, fleet = stack.enter_context(
            driver_and_fleet(
                "redis://sentinel-named-primary/0",
                "away",
                tmp_path,
                # No replica here: nothing could confirm a WAIT.
                _sentinel_env(sentinel, replicas=0),
                **_sentinel_options(sentinel, replicas=0),
            )
        )
        _started_while_away_then_works(primary, driver, fleet, "REDIS_SENTINELS")


def test_a_worker_started_while_redis_is_down_waits_and_then_works(
    transactional_db, tmp_path: Path
):
    """A plain ``REDIS_URL`` down when ``runjobs`` starts: the driver is
    built without asking the server (whether it is a cluster is asked on
    first use), so each role reports the outage and dials again later."""
    primary = RedisServer()
    with contextlib.ExitStack() as stack:
        stack.callback(primary.close)
        primary.start()
        driver, fleet = stack.enter_context(
            driver_and_fleet(primary.url, "down", tmp_path)
        )
        _started_while_away_then_works(primary, driver, fleet, "REDIS_URL")


def _started_while_away_then_works(primary, driver, fleet, setting: str) -> None:
    """Start a worker with ``primary`` down: it says it cannot reach Redis
    (naming ``setting``), then, with ``primary`` back, runs every job."""
    primary.stop(kill=True)
    worker = fleet.start("--concurrency", "2", name="worker")
    # Never reached: the start-up line naming where it looked (issue 22).
    worker.wait_for_output("jobs.db.unreachable", 30)
    assert setting in worker.output()
    primary.start()
    ids = [enqueue_until_acknowledged(f"late-{i}") for i in range(10)]
    wait_all_done(driver, ids, fleet)
    assert "Traceback" not in worker.output()
    assert worker.alive()
