"""A worker loses its database connection, and keeps settling (issue 11).

Each thread role of ``runjobs`` names its connection ``uj:<role>:...``; a
test terminates exactly one role's backend mid-run, the way a failover or an
idle-connection reaper does, and judges by the job table: every job enqueued
afterwards ends ``done`` at attempt 1 under its first claim (no rerun), the
wake-up is still proven, and the loss is logged at most once each way.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from django_ultimate_jobs.errors import DriverUnavailable
from django_ultimate_jobs.models import Job, Lease
from django_ultimate_jobs.worker.scheduler import SCHEDULER_LEASE_KEY
from tests.jobsapp.jobs import effect, poison, steady, write_after
from tests.jobsapp.models import Effect
from tests.support.backends import terminate_backends, wait_for_backends
from tests.support.waiting import wait_until
from tests.support.workers import assert_recovered_quietly, database_url

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PICKUP_S = 30.0
ROLES = ["claim", "settle", "keep", "listen", "schedule", "slot"]


def _all_done(ids: list) -> bool:
    return Job.objects.filter(id__in=ids, state="done").count() == len(ids)


def _wait_done(ids: list, fleet, timeout: float = PICKUP_S) -> None:
    def done() -> bool:
        return _all_done(ids)

    done.__name__ = f"{len(ids)}_jobs_done"
    wait_until(
        done,
        timeout,
        message=lambda: _states(ids) + "\n" + fleet.logs(),
    )


def _states(ids: list) -> str:
    rows = Job.objects.filter(id__in=ids).values_list("state", "attempt", "claims")
    counts: dict[tuple, int] = {}
    for row in rows:
        counts[row] = counts.get(row, 0) + 1
    return f"(state, attempt, claims) counts: {counts}"


def _own_pid() -> int:
    """This test's own backend (the main thread's connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own,) = cursor.fetchone()
    return int(own)


def _server() -> tuple[str, str]:
    settings = connection.settings_dict
    return database_url(settings), str(settings["NAME"])


@pytest.mark.parametrize("role", ROLES)
def test_a_role_whose_backend_is_terminated_settles_every_later_job_first_time(
    fleet, role
):
    url, database = _server()
    worker = fleet.start(
        "--concurrency",
        "2",
        env={"UJ_CRON_TASK": "1", "UJ_POLL": "", "UJ_IDLE_POLL_MAX": ""},
    )
    worker.wait_for_output("jobs.wake.live", PICKUP_S)
    before = [effect.enqueue(tag=f"before-{i}").id for i in range(20)]
    _wait_done(before, fleet)
    wait_for_backends(url, f"uj:{role}:%", database=database)

    lease = Lease.objects.get(lease_key=SCHEDULER_LEASE_KEY, slot=0)
    # The worker's backends of the role, never this test's own connection: an
    # in-process worker earlier in the session (run_jobs() claims in the
    # calling thread) leaves it named for the claim role.
    own = _own_pid()
    killed = terminate_backends(
        url,
        lambda b: b.application_name.startswith(f"uj:{role}:") and b.pid != own,
        database=database,
    )
    assert killed, f"no backend of role {role}"
    after = [effect.enqueue(tag=f"after-{i}").id for i in range(40)]
    _wait_done(after, fleet)
    if role == "schedule":
        # It renews its lease every 10 s: wait for one renewal after the
        # kill, so the scheduler has met the loss.
        wait_until(
            lambda: Lease.objects.get(pk=lease.pk).expires_at > lease.expires_at,
            PICKUP_S,
            message=worker.tail,
        )

    rows = Job.objects.filter(id__in=after)
    assert sorted({(r.state, r.attempt, r.claims) for r in rows}) == [("done", 1, 1)]
    # The wake-up is proven again after a loss (listen re-dials and probes).
    if role == "listen":
        wait_until(
            lambda: worker.output().count("jobs.wake.live") >= 2,
            PICKUP_S,
            message=worker.tail,
        )
    assert_recovered_quietly(worker)


def test_every_backend_terminated_at_once_settles_every_later_job_first_time(fleet):
    """The issue's reproduction: what a restart or a failover does to a worker."""
    url, database = _server()
    worker = fleet.start("--concurrency", "2")
    before = [effect.enqueue(tag=f"before-{i}").id for i in range(20)]
    _wait_done(before, fleet)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own,) = cursor.fetchone()

    killed = terminate_backends(url, lambda b: b.pid != own, database=database)
    assert len(killed) >= 3
    after = [effect.enqueue(tag=f"after-{i}").id for i in range(40)]
    _wait_done(after, fleet)

    rows = Job.objects.filter(id__in=after)
    assert sorted({(r.state, r.attempt, r.claims) for r in rows}) == [("done", 1, 1)]
    log = worker.output()
    assert "jobs.wake.unverified" not in log
    assert log.count("jobs.db.lost") <= 1 and log.count("jobs.db.recovered") <= 1


def test_a_body_whose_connection_is_terminated_runs_again_and_the_worker_goes_on(
    fleet,
):
    """Only the slot's backend is killed, under a running body: the body is
    handed back uncounted and runs again, and the worker goes on. Its
    outage, reported by the slot, used to be ended only by a role that had
    failed itself; none had, so every slot waited for a recovery that never
    came while the claim loop went on claiming (found by a reviewer)."""
    url, database = _server()
    worker = fleet.start("--concurrency", "2", env={"UJ_VISIBILITY": "30s"})
    cut = write_after.enqueue(sleep_ms=2000).id
    wait_until(
        lambda: Effect.objects.filter(job_id=cut, kind="start").exists(),
        PICKUP_S,
        message=fleet.logs,
    )
    own = _own_pid()
    assert terminate_backends(
        url,
        lambda b: b.application_name.startswith("uj:slot:") and b.pid != own,
        database=database,
    )
    after = [effect.enqueue(tag=f"after-{i}").id for i in range(10)]
    _wait_done([cut, *after], fleet)
    rows = Job.objects.filter(id__in=after)
    assert sorted({(r.state, r.attempt, r.claims) for r in rows}) == [("done", 1, 1)]
    # Handed back uncounted, then run again: attempt 1, second claim.
    assert Job.objects.values_list("attempt", "claims").get(id=cut) == (1, 2)
    log = worker.output()
    assert log.count("jobs.db.lost") == log.count("jobs.db.recovered") == 1, log


def test_a_poison_job_buries_itself_and_no_healthy_neighbour(fleet):
    """A body that kills its process spends its own attempts, nobody else's.

    Healthy jobs claimed ahead in the poison's batch lapse with it; their
    lapse is not charged (their start was never recorded). Jobs running in
    another slot of the killed process did start: their lapse is charged and
    recorded as such in their history, and they finish on a later attempt.
    """
    bad = poison.enqueue().id
    healthy = [steady.enqueue(sleep_ms=100).id for _ in range(100)]
    fleet.start("--processes", "2", "--concurrency", "4", env={"UJ_CLAIM_BATCH": "16"})
    _wait_done(healthy, fleet, timeout=80)
    wait_until(
        lambda: Job.objects.get(id=bad).state == "dead",
        30,
        message=lambda: f"{Job.objects.get(id=bad).state}\n" + fleet.logs(),
    )

    poisoned = Job.objects.get(id=bad)
    assert poisoned.attempt == 3
    crashed = {e.get("worker") for e in poisoned.history or []}
    charged_lapses = 0
    for row in Job.objects.filter(id__in=healthy):
        lapses = [
            e for e in row.history or [] if e.get("error", "").startswith("X_JOB")
        ]
        charged = [e for e in lapses if "not counted" not in e["error"]]
        charged_lapses += len(charged)
        # Attempts spent: this job's own charged lapses, plus the run that finished.
        assert row.attempt == 1 + len(charged), row.history
        # Charged only by a process the poison killed, never by another one.
        assert {e.get("worker") for e in charged} <= crashed, (row.history, crashed)
    # At each of the 3 crashes, each of the 3 other slots held its running
    # job, and may have finished another whose ack the settler had not yet
    # written (seen under load: 10 in all). Charging the jobs claimed ahead
    # too (12 a crash with 4 slots and a batch of 16) would pass it by far.
    assert charged_lapses <= 3 * 3 * 2


def test_a_read_only_database_refuses_enqueue_with_a_code_and_workers_wait(fleet):
    _, database = _server()
    ids = [effect.enqueue(tag=f"ro-{i}").id for i in range(10)]
    with connection.cursor() as cursor:
        cursor.execute(
            f'ALTER DATABASE "{database}" SET default_transaction_read_only = on'
        )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
        with pytest.raises(DriverUnavailable) as refused:
            effect.enqueue(tag="refused")
        assert refused.value.code == "X_DRIVER_UNAVAILABLE"
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = off")
        assert not Job.objects.filter(input__tag="refused").exists()

        worker = fleet.start("--concurrency", "2")
        worker.wait_for_output("jobs.db.lost", PICKUP_S)
        started = time.monotonic()
        lines_before = len(worker.output().splitlines())
        wait_until(lambda: time.monotonic() - started > 3, 10)  # the outage lasts
        assert Job.objects.filter(id__in=ids, state="ready").count() == len(ids)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f'ALTER DATABASE "{database}" RESET default_transaction_read_only'
            )
    _wait_done(ids, fleet)
    # Backed off, not spinning: a few lines for 3 s of refusals, not hundreds.
    assert len(worker.output().splitlines()) - lines_before <= 10, worker.tail()
    rows = Job.objects.filter(id__in=ids)
    assert sorted({(r.attempt, r.claims) for r in rows}) == [(1, 1)]


def test_a_failover_to_read_only_and_back_leaves_no_session_read_only(fleet):
    """Bodies cut off by the switch run again uncounted; nothing stays read-only.

    A session opened while the database was read-only would stay read-only
    for its life: every later job of that slot would fail its writes.
    """
    url, database = _server()
    # A lease longer than the fault: the claims stay this worker's.
    worker = fleet.start("--concurrency", "2", env={"UJ_VISIBILITY": "30s"})
    cut = [write_after.enqueue(sleep_ms=2000).id for _ in range(2)]
    wait_until(
        lambda: Effect.objects.filter(job_id__in=cut, kind="start").count() == 2,
        PICKUP_S,
        message=fleet.logs,
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own,) = cursor.fetchone()
        cursor.execute(
            f'ALTER DATABASE "{database}" SET default_transaction_read_only = on'
        )
    try:
        terminate_backends(url, lambda b: b.pid != own, database=database)
        during = [effect.enqueue(tag=f"ro-{i}").id for i in range(5)]
        worker.wait_for_output("jobs.db.lost", PICKUP_S)
        # The bodies' second write meets the switch (their settle waits for
        # the database to take writes again): the fault lasts 3 s.
        switched = time.monotonic()
        wait_until(lambda: time.monotonic() - switched >= 3, 10)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f'ALTER DATABASE "{database}" RESET default_transaction_read_only'
            )
    after = [effect.enqueue(tag=f"after-{i}").id for i in range(10)]
    _wait_done(cut + during + after, fleet)
    rows = Job.objects.filter(id__in=during + after)
    assert sorted({(r.attempt, r.claims) for r in rows}) == [(1, 1)]
    assert sorted(Job.objects.filter(id__in=cut).values_list("attempt", flat=True)) == [
        1,
        1,
    ]
    log = worker.output()
    assert log.count("jobs.db.lost") <= 2 and "dead-lettered" not in log


def test_a_table_locked_for_ten_seconds_delays_enqueue_and_claims_then_all_finish(
    fleet,
):
    import psycopg

    url, _ = _server()
    ids = [effect.enqueue(tag=f"lock-{i}").id for i in range(10)]
    worker = fleet.start("--concurrency", "2")
    _wait_done(ids, fleet)
    locked = threading.Event()
    release = threading.Event()

    def hold_the_lock() -> None:
        with psycopg.connect(url) as conn:
            conn.execute("LOCK TABLE ultimate_jobs_job IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(10)  # fault: a migration holding the table for 10 s
            conn.rollback()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        later = [effect.enqueue(tag=f"locked-{i}").id for i in range(10)]
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(15)
    assert waited >= 5, "the enqueue waited for the lock, then succeeded"
    _wait_done(later, fleet)
    rows = Job.objects.filter(id__in=later)
    assert sorted({(r.attempt, r.claims) for r in rows}) == [(1, 1)]
    assert worker.alive()
