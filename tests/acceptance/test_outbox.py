"""The outbox in a two-database project: real processes, judged by the tables.

Jobs live in a second database the test creates on the same server (CI has
one PostgreSQL server); enqueues run in transactions on ``default`` from a
separate process (tests/acceptance/outbox_client.py) with ``OUTBOX =
"required"``; ``runjobs`` relays and runs. Fault points (django_ultimate_jobs/faults.py)
kill a process after its COMMIT and before its callback, and a relay after
it published and before it marked; another app's commit callback raises
before ours. Every committed message must become exactly one job whose id
is the message's: nothing lost, nothing doubled; nothing of a rolled-back
transaction in either database.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from django_ultimate_jobs.faults import AFTER_OUTBOX_COMMIT, AFTER_OUTBOX_PUBLISH
from tests.support.backends import backends, terminate_backends
from tests.support.waiting import wait_until
from tests.support.workers import (
    REPO_ROOT,
    WorkerFleet,
    database_url,
    subprocess_env_for_url,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.acceptance.outbox_settings"
# The local relay's callback raises (and is swallowed, robust): only the
# runjobs relay publishes, so the test decides when publishing happens.
SILENT_CALLBACK = {"ULTIMATE_JOBS_FAULTS": f"{AFTER_OUTBOX_COMMIT}=raise"}


@pytest.fixture(scope="module")
def jobs_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    """A migrated second database on the test server, for the jobs tables."""
    with django_db_blocker.unblock():
        name = f"{connection.settings_dict['NAME']}_jobs"
        base = database_url(connection.settings_dict)
    admin = base.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)
            )
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = base.rsplit("/", 1)[0] + f"/{name}"
    env = _env(base, url)
    done = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--database", "jobs", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    yield url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)
            )
        )


def _env(base: str, jobs: str, **extra: str) -> dict[str, str]:
    return {
        **subprocess_env_for_url(base),
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "UJ_JOBS_DATABASE_URL": jobs,
        "UJ_OUTBOX_LEASE": "1s",
        **extra,
    }


@pytest.fixture
def project(jobs_url, fleet):
    """The two-database project: its env, a client runner, the tables."""
    with psycopg.connect(jobs_url, autocommit=True) as conn:
        conn.execute("TRUNCATE ultimate_jobs_job, ultimate_jobs_step CASCADE")
    return Project(database_url(connection.settings_dict), jobs_url, fleet)


class Project:
    def __init__(self, default_url: str, jobs_url: str, fleet) -> None:
        self.default_url = default_url
        self.jobs_url = jobs_url
        self.fleet = fleet

    def env(self, **extra: str) -> dict[str, str]:
        return _env(self.default_url, self.jobs_url, **extra)

    def client(self, *args: str, **env: str) -> tuple[int, dict[str, list[str]]]:
        done = subprocess.run(
            [sys.executable, "-m", "tests.acceptance.outbox_client", *args],
            cwd=REPO_ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
        return done.returncode, json.loads(line) if line.startswith("{") else {}

    def client_process(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.acceptance.outbox_client", *args],
            cwd=REPO_ROOT,
            env=self.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def relay(self, *args: str, **env: str):
        return self.fleet.start("--relay-only", *args, env=self.env(**env))

    def worker(self):
        return self.fleet.start("--no-scheduler", env=self.env())

    def jobs(self) -> dict[str, str]:
        """Job id -> state, in the jobs database (the test's jobs only)."""
        with psycopg.connect(self.jobs_url) as conn:
            rows = conn.execute(
                "SELECT id::text, state FROM ultimate_jobs_job WHERE name = 'tests.noop'"
            ).fetchall()
        return dict(rows)

    def messages(self) -> dict[str, bool]:
        """Message id -> published, in the default database."""
        with psycopg.connect(self.default_url) as conn:
            rows = conn.execute(
                "SELECT id::text, published_at IS NOT NULL FROM ultimate_jobs_outbox"
            ).fetchall()
        return dict(rows)

    def job_tables_in_default(self) -> int:
        with psycopg.connect(self.default_url) as conn:
            return conn.execute("SELECT count(*) FROM ultimate_jobs_job").fetchone()[0]

    def converged(self, ids: list[str]) -> bool:
        messages = self.messages()
        return set(self.jobs()) == set(ids) and all(messages[i] for i in ids)


def test_commit_runs_the_job_rollback_and_savepoint_leave_nothing(project):
    worker = project.worker()
    code, ids = project.client("mixed")
    assert code == 0
    assert len(ids["committed"]) == 3 and len(ids["rolled_back"]) == 2
    wait_until(
        lambda: project.jobs() == dict.fromkeys(ids["committed"], "done"),
        30,
        message=lambda: f"{project.jobs()}\n{worker.tail()}",
    )
    messages = project.messages()
    assert set(messages) == set(ids["committed"]) and all(messages.values())
    assert project.job_tables_in_default() == 0


def test_a_process_killed_after_commit_before_its_callback_loses_nothing(project):
    code, _ = project.client(
        "commit", "5", ULTIMATE_JOBS_FAULTS=f"{AFTER_OUTBOX_COMMIT}=exit"
    )
    assert code == 137
    staged = list(project.messages())
    assert len(staged) == 5 and not any(project.messages().values())
    assert project.jobs() == {}
    relay = project.relay()
    wait_until(lambda: project.converged(staged), 30, message=relay.tail)


def test_an_earlier_commit_callback_that_raises_loses_nothing(project):
    code, ids = project.client("earlier-callback-raises", "4", "--exit")
    assert code == 0 and len(ids["committed"]) == 4
    # Django ran no callback after the one that raised: nothing published.
    assert project.jobs() == {}
    relay = project.relay()
    wait_until(lambda: project.converged(ids["committed"]), 30, message=relay.tail)


def test_a_relay_killed_after_publishing_before_marking_doubles_nothing(project):
    code, ids = project.client("commit", "20", "--exit", **SILENT_CALLBACK)
    assert code == 0
    dying = project.relay(ULTIMATE_JOBS_FAULTS=f"{AFTER_OUTBOX_PUBLISH}=exit")
    assert dying.wait_exit(30) == 137
    # Published, not marked: the jobs exist, the messages are still pending.
    assert set(project.jobs()) == set(ids["committed"])
    assert not any(project.messages().values())
    relay = project.relay()
    wait_until(lambda: project.converged(ids["committed"]), 30, message=relay.tail)
    assert len(project.jobs()) == 20


def test_ten_thousand_enqueues_on_sixteen_threads_relay_restarted_twice(project):
    client = project.client_process("threads", "625", "--exit", **SILENT_CALLBACK)
    for at_least in (2_000, 5_000):
        relay = project.relay()
        wait_until(lambda n=at_least: len(project.jobs()) >= n, 120, message=relay.tail)
        relay.send(signal.SIGKILL)
        relay.proc.wait(10)
    relay = project.relay()
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err
    ids = json.loads(out.strip().splitlines()[-1])["committed"]
    assert len(ids) == len(set(ids)) == 10_000
    wait_until(lambda: project.converged(ids), 120, message=relay.tail)
    assert len(project.messages()) == 10_000


def test_the_relay_role_survives_its_backend_killed_and_a_database_restart(
    scratch_pg, scratch_db, tmp_path
):
    # Both aliases on one scratch database the test may crash. The callbacks
    # are silenced: only the running relay's sweep publishes, every 2 s at most.
    env = _env(scratch_db.url, scratch_db.url, UJ_OUTBOX_SWEEP_MAX="2s")
    fleet = WorkerFleet(env, tmp_path)
    project = Project(scratch_db.url, scratch_db.url, fleet)
    committed: list[str] = []

    def one_round() -> None:
        code, ids = project.client("commit", "3", "--exit", **SILENT_CALLBACK)
        assert code == 0
        committed.extend(ids["committed"])
        wait_until(lambda: project.converged(committed), 30, message=fleet.logs)

    try:
        relay = project.relay()
        one_round()
        killed = terminate_backends(
            scratch_db.url, "uj:relay:%", database=scratch_db.name
        )
        assert killed
        one_round()
        scratch_pg.restart(mode="immediate")
        one_round()
        assert relay.alive()
        assert len(project.jobs()) == 9
    finally:
        fleet.kill_all()
        print(fleet.logs())


def test_runjobs_runs_the_relay_role_unless_told_not_to(project):
    name = str(connection.settings_dict["NAME"])

    def roles(worker) -> set[str]:
        pid = f":{worker.pid}:"
        return {
            b.application_name.split(":")[1]
            for b in backends(project.default_url, "uj:%", database=name)
            if pid in b.application_name
        }

    plain = project.fleet.start("--no-scheduler", env=project.env())
    wait_until(lambda: "relay" in roles(plain), 30, message=plain.tail)
    quiet = project.fleet.start("--no-scheduler", "--no-relay", env=project.env())
    # Its claim loop is up (on the jobs database), and no relay connection
    # of it reached the outbox's.
    wait_until(
        lambda: any(
            f":{quiet.pid}:" in b.application_name
            for b in backends(project.jobs_url, "uj:claim:%")
        ),
        30,
        message=quiet.tail,
    )
    assert "relay" not in roles(quiet)


def test_a_process_that_commits_and_exits_publishes_what_it_staged(project):
    # No relay runs anywhere: only the exiting process's own can publish.
    code, ids = project.client("commit", "3000", "--exit")
    assert code == 0 and len(ids["committed"]) == 3000
    messages = project.messages()
    assert all(messages[i] for i in ids["committed"]), "left unpublished at exit"
    assert set(project.jobs()) == set(ids["committed"])


def test_the_how_tos_testcase_example_runs_with_a_jobs_alias(project):
    # Django's runner creates (and drops) test databases of its own: name
    # them after this run's, never the suite's shared default name.
    own = f"{connection.settings_dict['NAME']}_tc"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "test",
            "tests.acceptance.outbox_testcase",
            "--noinput",
            "-v",
            "1",
        ],
        cwd=REPO_ROOT,
        env={**project.env(), "ULTIMATE_JOBS_TEST_DB": own},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Ran 1 test" in done.stderr
