"""What only a Redis Cluster shows: the queues' hash tags spread over its
nodes, and every script stays in one slot (scripts/redis_cluster.sh runs
this with the conformance suite; on a standalone server it checks that
the layout would spread)."""

from __future__ import annotations

import pytest

from django_ultimate_jobs.drivers.base import ClaimOptions, EnqueueRequest

pytestmark = pytest.mark.redis


def test_queues_land_in_different_slots_and_each_script_in_one(redis_driver):
    store = redis_driver.store
    queues = [f"spread-{n}" for n in range(12)]
    for queue in queues:
        redis_driver.enqueue(
            EnqueueRequest(name="cluster.spread", input={}, queue=queue)
        )
    slots = (
        {store.client.cluster_keyslot(store.layout.queue(q) + "t") for q in queues}
        if store.cluster
        else {_keyslot(store.layout.queue(q)) for q in queues}
    )
    assert len(slots) > 1
    options = ClaimOptions(queues=queues, limit=12, worker_id="w", visibility_ms=30_000)
    assert len(redis_driver.claim(options).claimed) == 12


def _keyslot(prefix: str) -> str:
    return prefix[prefix.index("{") + 1 : prefix.index("}")]


def test_wait_for_replicas_is_refused_on_a_cluster(redis_url, prefix):
    """A cluster client cannot send ``WAIT`` on the connection that ran the
    script: ``REDIS_WAIT_REPLICAS`` is refused there, with a code (on a
    standalone server the driver is built)."""
    from django_ultimate_jobs.drivers.redis import RedisDriver
    from django_ultimate_jobs.errors import SettingsInvalid

    probe = RedisDriver(redis_url, prefix=prefix)
    cluster = probe.store.cluster
    probe.close()
    if not cluster:
        RedisDriver(redis_url, prefix=prefix, wait_replicas=1).close()
        return
    with pytest.raises(SettingsInvalid) as refused:
        RedisDriver(redis_url, prefix=prefix, wait_replicas=1)
    assert refused.value.meta == {"key": "REDIS_WAIT_REPLICAS"}
