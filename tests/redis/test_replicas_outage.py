"""Too few replicas for ``REDIS_WAIT_REPLICAS`` is one outage, logged once.

Real servers: a primary of the test's own with no replica, then a replica
that joins it. While claims are refused (``X_REDIS_NOT_REPLICATED``) every
read of another role lands (as the settle's writes land, unconfirmed, as
the docs let them): that ends nothing, or ``jobs.db.lost`` and
``jobs.db.recovered`` would alternate for as long as the replicas are away.
A claim confirmed by the replica that joined ends it, once.
"""

from __future__ import annotations

import logging
import threading

import pytest

from django_ultimate_jobs.drivers.base import ClaimOptions
from django_ultimate_jobs.drivers.outage import DatabaseOutage
from django_ultimate_jobs.drivers.redis import RedisDriver
from django_ultimate_jobs.drivers.redis.errors import RedisNotReplicated
from tests.support.redis import fresh_prefix, own_redis, wait_for_replicas

pytestmark = [pytest.mark.redis]

CLAIM = ClaimOptions(queues=["default"], limit=1, worker_id="w-r", visibility_ms=30_000)


def _in_thread(work):
    """Run ``work`` in a thread of its own (a role's thread-local session)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def test_claims_refused_for_want_of_replicas_are_one_outage_until_a_claim_is_confirmed(
    caplog,
):
    with own_redis() as primary:
        driver = RedisDriver(
            primary.url, prefix=fresh_prefix(), wait_replicas=1, wait_timeout_ms=50
        )
        outage = DatabaseOutage(first_retry_s=0.0)
        claim = driver.sessions.open("claim", worker_id="w-r", outage=outage)
        claim.bind()
        driver.now()
        claim.ok()  # reached once: a loss from now on is an outage
        caplog.set_level(logging.DEBUG, logger="django_ultimate_jobs")
        try:
            with pytest.raises(RedisNotReplicated) as refused:
                driver.claim(CLAIM)
            assert claim.failed(refused.value)
            assert outage.down and outage.partial_since is not None

            def settle_role_reads() -> None:
                settle = driver.sessions.open("settle", worker_id="w-r", outage=outage)
                settle.bind()
                driver.now()  # a read lands
                settle.ok()

            for _ in range(3):
                _in_thread(settle_role_reads)
                assert outage.down, "another role's answer ended an outage of replicas"
                with pytest.raises(RedisNotReplicated) as refused:
                    driver.claim(CLAIM)
                claim.failed(refused.value)
                claim.ok()  # as a role whose next call landed would say
                assert outage.down, "a read of the failing role ended it"

            with own_redis("--replicaof", "127.0.0.1", str(primary.port)):
                wait_for_replicas(primary.url, 1)
                driver.claim(CLAIM)  # confirmed by the replica
                claim.ok()
                assert not outage.down
        finally:
            driver.close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said.count("jobs.db.lost") == 1
    assert said.count("jobs.db.recovered") == 1
    assert outage.outages == 1
