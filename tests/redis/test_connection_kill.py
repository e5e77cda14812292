"""A worker loses one role's Redis connection, and keeps settling.

The Redis twin of tests/acceptance/test_connection_loss.py: each role of
``runjobs`` names its connection ``uj:<role>:<pid>:<worker>`` (``CLIENT
SETNAME``); a test kills exactly that role's connections (``CLIENT KILL
ID`` of each connection of that name, as a failover or an idle-connection
reaper does) and judges by the job rows in Redis: every job enqueued
afterwards ends ``done`` at attempt 1 under its first claim, and the role
that lost its connection carries on (the scheduler renews its lease, the
listener proves the wake again, the relay publishes what a body enqueued
inside a transaction).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from uuid import UUID

import pytest

from django_ultimate_jobs.worker.scheduler import SCHEDULER_LEASE_KEY
from tests.redis.conftest import admin_client, driver_and_fleet, wait_all_done
from tests.support.redis import own_redis
from tests.support.waiting import wait_until
from tests.support.workers import assert_recovered_quietly

pytestmark = [pytest.mark.acceptance, pytest.mark.redis]

PICKUP_S = 30.0
ROLES = ["claim", "settle", "keep", "listen", "schedule", "slot", "relay"]


def _named(admin, role: str) -> list[dict]:
    return [
        c for c in admin.client_list() if c.get("name", "").startswith(f"uj:{role}:")
    ]


def _lease_expiry(driver):
    records = driver.leases.records(prefix=SCHEDULER_LEASE_KEY)
    held = [r.expires_at for r in records if r.key == SCHEDULER_LEASE_KEY]
    return held[0] if held else None


def _enqueue(driver, fleet, tag: str, count: int, role: str) -> list:
    """``count`` jobs the role under test touches; their ids once enqueued."""
    from tests.jobsapp.jobs import effect, fan_out

    tags = [f"{tag}-{i}" for i in range(count)]
    if role == "relay":
        # A body enqueueing inside a transaction: on Redis the children go
        # through the outbox, published by the worker's relay.
        parent = fan_out.enqueue(tags=tags).id
        wait_all_done(driver, [parent], fleet, timeout=PICKUP_S)
        return [UUID(child) for child in driver.get(parent).result]
    # A slot's connection is the one its bodies write to the store with;
    # the keeper's is used while jobs run past a heartbeat (every 500 ms).
    progress = role == "slot"
    sleep_ms = 200 if role == "keep" else 0
    return [
        effect.enqueue(tag=t, progress=progress, sleep_ms=sleep_ms).id for t in tags
    ]


@pytest.mark.parametrize("role", ROLES)
def test_a_role_whose_connection_is_killed_settles_every_later_job_first_time(
    transactional_db, tmp_path: Path, role: str
):
    env = {"UJ_CRON_TASK": "1", "UJ_POLL": "", "UJ_IDLE_POLL_MAX": ""}
    with (
        own_redis() as server,
        driver_and_fleet(server.url, "roles", tmp_path, env) as (driver, fleet),
        contextlib.closing(admin_client(server.url)) as admin,
    ):
        worker = fleet.start("--concurrency", "2")
        worker.wait_for_output("jobs.wake.live", PICKUP_S)
        wait_all_done(driver, _enqueue(driver, fleet, "before", 10, role), fleet)
        wait_until(lambda: _named(admin, role), PICKUP_S, message=fleet.logs)
        wait_until(lambda: _lease_expiry(driver), PICKUP_S, message=fleet.logs)
        lease = _lease_expiry(driver)

        victims = _named(admin, role)
        for victim in victims:
            admin.client_kill_filter(_id=victim["id"])
        assert victims, f"no connection of role {role}"
        after = _enqueue(driver, fleet, "after", 30, role)
        wait_all_done(driver, after, fleet, timeout=PICKUP_S)
        if role == "schedule":
            # It renews its lease every 10 s: wait for one renewal after the
            # kill, so the scheduler has met the loss and got over it.
            wait_until(
                lambda: _lease_expiry(driver) > lease, PICKUP_S, message=worker.tail
            )
        if role == "listen":
            # The wake-up is proven again after the loss (re-dial, probe).
            wait_until(
                lambda: worker.output().count("jobs.wake.live") >= 2,
                PICKUP_S,
                message=worker.tail,
            )
        # The role that lost its connection dialled again under its name.
        wait_until(lambda: _named(admin, role), PICKUP_S, message=worker.tail)

        rows = [driver.get(job_id) for job_id in after]
        assert {(r.state, r.attempt, r.claims) for r in rows} == {("done", 1, 1)}
        if role == "slot":
            assert all(r.progress for r in rows)
            assert "jobs.progress.failed" not in worker.output()
        assert_recovered_quietly(worker)
