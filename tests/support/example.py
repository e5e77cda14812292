"""The example project (``example_project/``) run by tests, as ``./dev demo`` runs it.

:func:`scratch_database` makes a scratch database on the test server,
:func:`manage` runs one ``manage.py`` command in it, and :class:`Demo`
starts the demo's two processes, ``runjobs`` and ``runserver``, on it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import psycopg
from django.db import connection
from psycopg import sql

from .waiting import wait_until
from .workers import REPO_ROOT, WorkerProcess, database_url

__all__ = ["EXAMPLE", "Demo", "example_env", "manage", "scratch_database"]

EXAMPLE = REPO_ROOT / "example_project"
MANAGE_TIMEOUT_S = 300
START_TIMEOUT_S = 60


@contextmanager
def scratch_database() -> Iterator[str]:
    """A scratch database on the test server; its URL. Dropped afterwards."""
    server = database_url({**connection.settings_dict, "NAME": "postgres"})
    name = f"test_uj_example_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield database_url({**connection.settings_dict, "NAME": name})
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)
                )
            )


def example_env(url: str, **extra: str) -> dict[str, str]:
    """The environment of an example-project process on database ``url``."""
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", **extra}
    # manage.py picks its own settings; the suite's would win over setdefault.
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def manage(url: str, *args: str, **env: str) -> str:
    """Run ``example_project/manage.py *args`` to completion; answer its stdout."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=example_env(url, **env),
        capture_output=True,
        text=True,
        timeout=MANAGE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Demo:
    """``./dev demo`` on a scratch database: migrated, seeded, both processes up.

    The same steps as ``cmd_demo`` in ``./dev`` (migrate, maintain_partitions,
    seed_shop, then ``runjobs --concurrency 4`` and ``runserver``), plus a
    superuser ``username`` / ``password`` for the admin.
    """

    def __init__(self, url: str, logs: Path, *, username: str, password: str):
        self.url = url
        manage(url, "migrate", "--noinput", "--verbosity", "0")
        manage(url, "maintain_partitions")
        manage(url, "seed_shop")
        manage(
            url,
            "createsuperuser",
            "--noinput",
            "--username",
            username,
            "--email",
            f"{username}@example.com",
            DJANGO_SUPERUSER_PASSWORD=password,
        )
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        script = str(EXAMPLE / "manage.py")
        env = example_env(url)
        self.worker = WorkerProcess(
            "demo-runjobs",
            [sys.executable, script, "runjobs", "--concurrency", "4"],
            env,
            logs / "demo-runjobs.log",
        )
        self.server = WorkerProcess(
            "demo-runserver",
            [
                sys.executable,
                script,
                "runserver",
                f"127.0.0.1:{self.port}",
                "--noreload",
            ],
            env,
            logs / "demo-runserver.log",
        )
        wait_until(
            lambda: _answers(self.port),
            START_TIMEOUT_S,
            message=lambda: self.logs(),
        )

    def logs(self) -> str:
        """Both processes' output, for a failure message."""
        return f"{self.worker.tail()}\n{self.server.tail()}"

    def stop(self) -> None:
        """Kill both processes (and anything they started)."""
        for process in (self.worker, self.server):
            process.terminate_group()
