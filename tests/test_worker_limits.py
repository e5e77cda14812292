"""In-process limits through the real worker path (claim, admit, shed)."""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import connection

from django_ultimate_jobs.drivers.base import ClaimOptions
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.limits import LimitConfig
from django_ultimate_jobs.worker.runner import Worker
from tests.support.backends import terminate_backends
from tests.support.waiting import wait_until
from tests.support.workers import database_url, start_worker_thread

pytestmark = pytest.mark.postgres


@pytest.fixture
def tenanted(declare_jobs):
    declare = declare_jobs("lim", "t.lim")

    @declare(tenant=lambda input: input["t"])
    def work(ctx, **input):
        return None

    return work


@pytest.fixture
def untenanted(declare_jobs):
    @declare_jobs("lim", "t.lim")()
    def bare(ctx):
        return None

    return bare


def limited_worker(driver, **limits) -> Worker:
    config = WorkerConfig.from_settings(queues=("lim",), limits=LimitConfig(**limits))
    return Worker(config, driver=driver)


def test_one_claim_takes_no_more_of_a_tenant_than_it_may_run(
    pg_driver, tenanted, untenanted
):
    """A flood's rows beyond the tenant's room stay ready and unclaimed, and
    the next claim skips the full tenant to reach the others' rows."""
    flood = [tenanted.enqueue(t="a").id for _ in range(5)]
    other = tenanted.enqueue(t="b").id
    bare = untenanted.enqueue().id
    worker = limited_worker(pg_driver, per_tenant=2)
    first, _ = worker.claims.claim(10)
    taken = {a.claimed.id for a in first}
    assert len(taken) == 2 and taken <= set(flood)
    second, _ = worker.claims.claim(10)
    assert sorted(a.claimed.id for a in second) == sorted([other, bare])
    assert worker.claims.claim(10) == ([], [])  # a is full: its 3 rows are skipped
    for job_id in set(flood) - taken:
        row = pg_driver.get(job_id)
        assert (row.state, row.attempt, row.claims) == ("ready", 0, 0)


def test_a_lapsed_row_over_a_limit_is_shed_without_spending_its_attempt(
    pg_driver, tenanted, clock, caplog
):
    """A re-taken lease of a full tenant goes back at once, attempt given
    back, and runs later as attempt 1."""
    enqueued = tenanted.enqueue(t="a")
    options = ClaimOptions(
        queues=["lim"], limit=1, worker_id="gone", visibility_ms=1_000
    )
    assert len(pg_driver.claim(options).claimed) == 1
    clock.advance(seconds=2)
    worker = limited_worker(pg_driver, per_tenant=1)
    assert worker.held.limiter is not None
    running = worker.held.limiter.try_acquire("lim", "a")  # another of a's runs
    with caplog.at_level(logging.INFO, logger="django_ultimate_jobs"):
        assert worker.claims.claim(10) == ([], [])
    (shed,) = [r for r in caplog.records if r.msg == "jobs.limits.shed"]
    assert (shed.tenant, shed.blocked_by) == ("a", "tenant")
    row = pg_driver.get(enqueued.id)
    assert (row.state, row.attempt, row.run_at <= clock.now()) == ("ready", 0, True)
    assert running is not None
    running.release()
    (execution,) = worker.tick()
    assert execution.outcome == "completed"
    assert pg_driver.get(enqueued.id).attempt == 1


def test_a_shed_whose_connection_is_terminated_is_reported_and_the_worker_goes_on(
    committed_pg_driver, tenanted, monkeypatch, caplog
):
    """The claim connection is killed between a claim and the shed of a full
    tenant's re-taken row: the claim role reports it (the process's outage,
    not a shed-failed traceback), reconnects, and every row ends done at
    attempt 1 (the shed row by its lease's lapse)."""
    url, database = (
        database_url(connection.settings_dict),
        connection.settings_dict["NAME"],
    )
    gone = ClaimOptions(queues=["lim"], limit=1, worker_id="gone", visibility_ms=500)
    retaken = tenanted.enqueue(t="a").id
    assert len(committed_pg_driver.claim(gone).claimed) == 1  # lapses in 0.5 s
    config = WorkerConfig.from_settings(
        queues=("lim",),
        limits=LimitConfig(per_tenant=1),
        visibility_ms=2_000,
        heartbeat_ms=500,
        poll_ms=50,
    )
    worker = Worker(config, driver=committed_pg_driver)
    assert worker.held.limiter is not None
    running = worker.held.limiter.try_acquire("lim", "a")  # another of a's runs
    assert running is not None
    killed: list[object] = []
    real_nack = committed_pg_driver.nack
    with connection.cursor() as cursor:  # this test's own backend: spared
        cursor.execute("SELECT pg_backend_pid()")
        (own,) = cursor.fetchone()

    def the_claimers(backend):
        return backend.application_name.startswith("uj:claim:") and backend.pid != own

    def nack_after_a_kill(request):
        if not killed and threading.current_thread().name == "claimer":
            killed.extend(terminate_backends(url, the_claimers, database=database))
        return real_nack(request)

    monkeypatch.setattr(committed_pg_driver, "nack", nack_after_a_kill)

    caplog.set_level(logging.INFO, logger="django_ultimate_jobs")
    runner = start_worker_thread(worker, name="claimer")
    try:
        wait_until(lambda: killed, 15, message=lambda: caplog.text)
        others = [tenanted.enqueue(t=f"b{i}").id for i in range(5)]
        running.release()
        wait_until(
            lambda: Job.objects.filter(state="done").count() == 6,
            20,
            message=lambda: f"{list(Job.objects.values_list('state', 'attempt'))}",
        )
    finally:
        worker.request_stop(deadline_s=5)
        runner.join(10)
    rows = Job.objects.filter(id__in=[retaken, *others])
    assert {(r.state, r.attempt) for r in rows} == {("done", 1)}
    lost = [r for r in caplog.records if r.msg == "jobs.db.lost"]
    assert [r.role for r in lost if r.levelno == logging.WARNING] == ["claim"]
    assert "jobs.limits.shed-failed" not in caplog.text
    assert "jobs.db.recovered" in caplog.text


def test_a_queue_limited_to_zero_is_never_claimed(pg_driver, tenanted):
    """Zero is a hard stop: the worker claims nothing from that queue."""
    enqueued = tenanted.enqueue(t="a")
    worker = limited_worker(pg_driver, queues={"lim": 0})
    assert worker.tick() == []
    assert pg_driver.get(enqueued.id).state == "ready"


def test_limits_are_released_once_the_body_has_run(pg_driver, tenanted):
    """A tenant's room comes back after its jobs ran: a backlog drains."""
    ids = [tenanted.enqueue(t="a").id for _ in range(3)]
    worker = limited_worker(pg_driver, per_tenant=1)
    for _ in ids:
        (execution,) = worker.tick()
        assert execution.outcome == "completed"
    assert worker.held.limiter is not None and worker.held.limiter.in_flight() == 0
    assert {pg_driver.get(job_id).state for job_id in ids} == {"done"}
