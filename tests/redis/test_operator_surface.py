"""The admin and ``manage.py jobs`` on the Redis driver: the pages and verbs
that go through the operator API work; the pages that read the job table
say where the jobs are instead of showing an empty list."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_ultimate_jobs.drivers.base import (
    AckRequest,
    ClaimOptions,
    EnqueueRequest,
    NackRequest,
)

pytestmark = pytest.mark.redis


def _dead(driver, name: str) -> str:
    enqueued = driver.enqueue(EnqueueRequest(name=name, input={"n": 1}, queue="ops"))
    (job,) = driver.claim(
        ClaimOptions(queues=["ops"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    driver.nack(
        NackRequest(
            job_id=job.id, identity=job.identity, dead_letter=True, error="X_NO: no"
        )
    )
    return str(enqueued.id)


@pytest.mark.django_db
def test_admin_pages_on_redis(admin_client, redis_driver):
    job_id = _dead(redis_driver, "redis.admin")
    listing = admin_client.get(reverse("admin:ultimate_jobs_job_changelist"))
    assert listing.status_code == 200
    assert (
        'id="uj-tables-elsewhere"' in listing.text
        and "<code>redis</code>" in listing.text
    )
    dead = admin_client.get(reverse("admin:ultimate_jobs_job_dead_letter"))
    assert "jobs ls --state dead" in dead.text
    page = admin_client.get(reverse("admin:ultimate_jobs_job_change", args=[job_id]))
    assert page.status_code == 200 and "X_NO: no" in page.text
    queues = admin_client.get(reverse("admin:ultimate_jobs_job_queues"))
    assert queues.status_code == 200 and "ops" in queues.text
    for slug in ("workers", "leases", "cron_tasks", "dashboard"):
        got = admin_client.get(reverse(f"admin:ultimate_jobs_job_{slug}"))
        assert got.status_code == 200, slug


@pytest.mark.django_db
def test_dashboard_charts_on_redis(admin_client, redis_driver):
    """The dashboard's charts read Redis' counters, per queue: one dead on
    ``ops``, two done on ``mail`` (each with a pickup latency sample)."""
    _dead(redis_driver, "redis.chart")
    for _ in range(2):
        redis_driver.enqueue(EnqueueRequest(name="redis.chart", input={}, queue="mail"))
    claimed = redis_driver.claim(
        ClaimOptions(queues=["mail"], limit=2, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert redis_driver.ack_many(
        [AckRequest(job_id=job.id, identity=job.identity) for job in claimed]
    ) == [True, True]
    url = reverse("admin:ultimate_jobs_job_dashboard")
    every = admin_client.get(url).text
    assert 'data-done="2" data-retried="0" data-failed="0" data-dead="1"' in every
    assert 'data-pickups="3"' in every
    mail = admin_client.get(url, {"queue": "mail", "span": "day"}).text
    assert 'data-done="2" data-retried="0" data-failed="0" data-dead="0"' in mail


@pytest.mark.django_db
def test_manage_py_jobs_on_redis(redis_driver):
    job_id = _dead(redis_driver, "redis.cli")

    def jobs(*args: str):
        out = StringIO()
        call_command("jobs", "--json", *args, stdout=out)
        return json.loads(out.getvalue())

    listed = jobs("ls", "--queue", "ops", "--state", "dead")
    assert [row["id"] for row in listed["jobs"]] == [job_id]
    assert jobs("count", "--queue", "ops", "--state", "dead") == 1
    assert jobs("show", job_id)["last_error"] == "X_NO: no"
    assert jobs("retry", job_id)["state"] == "ready"
    assert jobs("promote", job_id)["state"] == "ready"
    assert jobs("cancel", job_id)["state"] == "cancelled"
    assert [p.name for p in redis_driver.paused_queues()] == []
    jobs("pause", "ops")
    assert [p.name for p in redis_driver.paused_queues()] == ["ops"]
    jobs("resume", "ops")
    assert redis_driver.paused_queues() == []
