"""A ``runjobs`` that cannot serve says why once and stops (issue 22, items 1-3).

Real ``runjobs`` subprocesses: pointed at a port where nothing listens, at a
host that does not resolve, at a database nobody migrated, and a burst
started while the outbox holds committed messages.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, transaction
from psycopg import sql

from django_ultimate_jobs.drivers.base import EnqueueRequest
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.outbox.store import OutboxStore
from tests.jobsapp.models import Effect
from tests.support.workers import database_url, subprocess_env_for_url

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

CONNECT_WAIT_S = 3
UNREACHABLE = "runjobs: cannot reach"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env_at(url: str, **extra: str) -> dict[str, str]:
    return subprocess_env_for_url(
        url, **{"UJ_BURST_CONNECT_WAIT": f"{CONNECT_WAIT_S}s", **extra}
    )


@pytest.mark.parametrize(
    ("host", "port"),
    [("127.0.0.1", _closed_port()), ("no-such-host.invalid", 5432)],
    ids=["closed-port", "unknown-host"],
)
@pytest.mark.parametrize("mode", [["--burst"], ["--relay-only", "--burst"]])
def test_a_burst_that_never_reaches_its_database_says_where_once_and_exits_1(
    fleet, host, port, mode
):
    url = f"postgresql://nobody@{host}:{port}/shop"
    started = time.monotonic()
    worker = fleet.start(*mode, env=_env_at(url))
    status = worker.wait_exit(CONNECT_WAIT_S + 20)
    took = time.monotonic() - started
    out = worker.output()
    lines = [line for line in out.splitlines() if line.startswith(UNREACHABLE)]
    assert status == 1, out
    assert len(lines) == 1, out  # retried several times, said once
    (line,) = lines
    assert f"at {host}:{port}" in line
    assert '"shop"' in line and 'DATABASES["default"]' in line
    assert "fix: check HOST, PORT and NAME" in line and "server is up" in line
    assert "nothing to do" not in out
    assert "Traceback" not in out
    assert "BURST_CONNECT_WAIT" in out
    # Bounded: the wait, a Django start, and a DNS answer at most.
    assert CONNECT_WAIT_S <= took < CONNECT_WAIT_S + 15, out


def test_a_long_running_worker_that_never_reached_its_database_keeps_trying(fleet):
    url = f"postgresql://nobody@127.0.0.1:{_closed_port()}/shop"
    worker = fleet.start(env=_env_at(url, UJ_BURST_CONNECT_WAIT="1s"))
    worker.wait_for_output(UNREACHABLE, 20)
    worker.wait_for_output("jobs.db.unreachable", 5)
    # Well past the burst bound it is still there, trying on its backoff,
    # and has said it once (at most once a minute).
    with pytest.raises(subprocess.TimeoutExpired):
        worker.proc.wait(timeout=2 * CONNECT_WAIT_S)
    assert worker.output().count(UNREACHABLE) == 1, worker.tail()


@pytest.fixture
def unmigrated_url() -> Iterator[str]:
    """An empty database on the test server: migrate never ran there."""
    name = f"{connection.settings_dict['NAME']}_unmigrated"
    base = database_url(connection.settings_dict)
    admin = base.rsplit("/", 1)[0] + "/postgres"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        sql.Identifier(name)
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(drop)


def test_a_burst_before_migrate_says_tables_missing_once_and_exits_1(
    fleet, unmigrated_url
):
    worker = fleet.start("--burst", env=_env_at(unmigrated_url))
    status = worker.wait_exit(30)
    out = worker.output()
    assert status == 1, out
    assert out.count("X_JOBS_TABLES_MISSING") == 1, out
    assert "python manage.py migrate ultimate_jobs" in out
    assert "Traceback" not in out
    assert len(out.splitlines()) < 10, out


def _stage(count: int) -> None:
    # Staged and committed, with no commit callback: only the relay role of
    # the runjobs below publishes them.
    store = OutboxStore("default")
    with transaction.atomic():
        store.stage(
            [
                EnqueueRequest(name="tests.effect", input={}, queue="default")
                for _ in range(count)
            ]
        )


def test_a_burst_ends_only_once_the_outbox_it_serves_is_empty(fleet):
    # The race: the relay publishes just after the burst's claim found
    # nothing (1 run in 5 left published jobs ready). Five bursts in a row.
    for round_ in range(5):
        _stage(3)
        worker = fleet.start("--burst", "--no-scheduler", name=f"burst-{round_}")
        assert worker.wait_exit(60) == 0, worker.output()
        states = set(Job.objects.filter(name="tests.effect").values_list("state"))
        assert states == {("done",)}, (round_, states, worker.output())
    assert Effect.objects.count() == 15
