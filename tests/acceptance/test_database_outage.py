"""The database goes away and comes back while workers run (issue 11).

Two faults, each judged by the job table:

- a 10 s network outage, made by a TCP proxy between the worker and the
  server (tests/support/tcp_proxy.py): the worker makes at most 5
  connection attempts a second and logs a handful of lines, and the jobs
  that finished during the outage are settled when it ends, at attempt 1;
- ``pg_ctl restart -m immediate``, twice, of a scratch server the test
  starts itself (tests/support/scratch_pg.py), under two workers and a
  steady stream of enqueues: every job ends ``done``, none ``dead``, and
  the workers never restart.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
import pytest

from django_ultimate_jobs.models import Job
from tests.jobsapp.jobs import effect, locked, steady
from tests.jobsapp.models import Effect
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT, WorkerFleet

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PICKUP_S = 30.0
OUTAGE_S = 10.0


def _done(ids: list) -> bool:
    return Job.objects.filter(id__in=ids, state="done").count() == len(ids)


def _summary(ids: list) -> str:
    rows = Job.objects.filter(id__in=ids)
    counts: dict[tuple, int] = {}
    for row in rows.values_list("state", "attempt", "claims"):
        counts[row] = counts.get(row, 0) + 1
    return f"(state, attempt, claims): {counts}"


def test_a_ten_second_outage_is_waited_out_quietly_and_finished_work_is_kept(
    proxied_fleet,
):
    fleet, proxy = proxied_fleet
    worker = fleet.start("--concurrency", "4")
    warm = [effect.enqueue(tag=f"warm-{i}").id for i in range(10)]
    wait_until(lambda: _done(warm), PICKUP_S, message=fleet.logs)
    # Four bodies of 3 s are running when the network goes: they finish
    # during the outage, with nobody to tell.
    running = [steady.enqueue(sleep_ms=3000).id for _ in range(4)]
    # Their bodies have started (their first write is in): `running` alone
    # is set at claim, and a cut before the first write fails that write.
    wait_until(
        lambda: Effect.objects.filter(job_id__in=running, kind="run").count() == 4,
        PICKUP_S,
        message=fleet.logs,
    )
    lines_before = len(worker.output().splitlines())

    cut_at = time.monotonic()
    proxy.cut()
    during = [effect.enqueue(tag=f"during-{i}").id for i in range(10)]
    wait_until(lambda: time.monotonic() - cut_at >= OUTAGE_S, OUTAGE_S + 5)  # fault
    restored_at = time.monotonic()
    proxy.restore()

    wait_until(lambda: _done(running + during), PICKUP_S, message=fleet.logs)
    rows = Job.objects.filter(id__in=running + during)
    assert sorted({(r.attempt, r.claims) for r in rows}) == [(1, 1)], _summary(
        running + during
    )
    assert proxy.peak_attempt_rate(cut_at, restored_at) <= 5
    outage_log = worker.output().splitlines()[lines_before:]
    assert len(outage_log) <= 10, "\n".join(outage_log)
    text = "\n".join(outage_log)
    assert text.count("jobs.db.lost") == 1 and text.count("jobs.db.recovered") == 1
    assert worker.alive()


def test_an_outage_under_a_held_lock_is_logged_once_by_the_process(proxied_fleet):
    """A body holds a lock when the network goes: the worker's roles and the
    lock keeper renewing it all fail, and the process says so once each way
    (the keeper used to keep its own view and log a second pair)."""
    fleet, proxy = proxied_fleet
    worker = fleet.start("--concurrency", "2")
    held = locked.enqueue(key="outage", sleep_ms=6000).id
    wait_until(
        lambda: Effect.objects.filter(job_id=held, kind="locked").exists(),
        PICKUP_S,
        message=fleet.logs,
    )
    lines_before = len(worker.output().splitlines())
    cut_at = time.monotonic()
    proxy.cut()
    # Long enough for several renewals (every 667 ms) to fail.
    wait_until(lambda: time.monotonic() - cut_at >= 3.0, 8)  # fault
    proxy.restore()

    wait_until(lambda: _done([held]), PICKUP_S, message=fleet.logs)
    text = "\n".join(worker.output().splitlines()[lines_before:])
    assert text.count("jobs.db.lost") == 1, text
    assert text.count("jobs.db.recovered") == 1, text
    assert worker.alive()


# The producer: a client process that enqueues one job every 10 ms for
# STREAM_S seconds, retrying an enqueue until the server answers, and
# appends each id to a file as soon as it is committed.
STREAM_S = 12.0
PRODUCER = """
import sys, threading, time
import django
django.setup()
from django.db import connection
from tests.jobsapp.jobs import effect
pause = threading.Event()
deadline = time.monotonic() + float(sys.argv[1])
with open(sys.argv[2], "a") as out:
    while time.monotonic() < deadline:
        try:
            job_id = effect.enqueue(tag="stream").id
        except Exception:
            connection.close()
        else:
            out.write(f"{job_id}\\n")
            out.flush()
        pause.wait(0.01)
"""


def _rows(url: str) -> list[tuple[str, int, int]]:
    with psycopg.connect(url, connect_timeout=5) as conn:
        return conn.execute(
            "SELECT state, attempt, claims FROM ultimate_jobs_job"
        ).fetchall()


def _counts(rows: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], int]:
    counts: dict[tuple[str, int, int], int] = {}
    for row in rows:
        counts[row] = counts.get(row, 0) + 1
    return counts


def test_two_immediate_restarts_under_a_steady_stream_lose_nothing(
    scratch_db, tmp_path
):
    """``pg_ctl restart -m immediate`` twice: no job dead, every job done."""
    env = scratch_db.subprocess_env(UJ_VISIBILITY="30s")
    fleet = WorkerFleet(env, tmp_path)
    ids_file = tmp_path / "enqueued.txt"
    ids_file.touch()

    def enqueued() -> int:
        return len(ids_file.read_text().split())

    try:
        workers = [fleet.start("--concurrency", "4", name=f"w{i}") for i in (1, 2)]
        pids = [w.pid for w in workers]
        producer = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, str(STREAM_S), str(ids_file)],
            env=env,
            cwd=REPO_ROOT,
        )
        for _restart in (1, 2):
            count = enqueued()
            wait_until(lambda c=count: enqueued() >= c + 100, PICKUP_S)
            scratch_db.server.restart(mode="immediate")
            scratch_db.server.wait_ready()
        assert producer.wait(timeout=STREAM_S + 30) == 0
        total = enqueued()
        assert total >= 300

        def all_done() -> bool:
            # Every id the producer saw committed is there. There may be a
            # few more: an enqueue whose COMMIT reached the server just as
            # it went down raised in the producer (in doubt) and was made
            # again, as a client must; those rows run too.
            rows = _rows(scratch_db.url)
            return len(rows) >= total and all(r[0] == "done" for r in rows)

        wait_until(all_done, 60, message=lambda: _counts(_rows(scratch_db.url)))
        with psycopg.connect(scratch_db.url, connect_timeout=5) as conn:
            stored = {
                str(r[0]) for r in conn.execute("SELECT id FROM ultimate_jobs_job")
            }
        assert set(ids_file.read_text().split()) <= stored
        assert len(stored) - total <= 2 * 2  # in-doubt commits: a few per restart
        counts = _counts(_rows(scratch_db.url))
        # No attempt spent by the restarts: a body running when the server
        # went down either finished and was settled afterwards under its
        # claim, or lost its connection and was handed back uncounted (a
        # second claim, at most one per slot (4 x 2 workers) per restart).
        assert all(state == "done" and attempt == 1 for state, attempt, _ in counts), (
            counts
        )
        again = sum(n for (_, _, claims), n in counts.items() if claims > 1)
        assert again <= 4 * 2 * 2, counts
        assert [w.pid for w in workers] == pids and all(w.alive() for w in workers)
        for worker in workers:
            assert worker.output().count("jobs.db.recovered") >= 1, worker.tail()
    finally:
        fleet.kill_all()
        print(fleet.logs())
