"""What the benches share: the server and database names, worker processes
behind a gate, CPU readings, the environment of a worker, the commit.

Every bench starts with ``server_url()`` (which server, said on stderr; a bad
``DATABASE_URL`` is one line and exit 1) and names its database with
``bench_db_name()`` (``BENCH_DB_PREFIX`` prepended, so two people can run the
same bench on one server).
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "DEFAULT_URL",
    "GATE_SETTLE_S",
    "ROOT",
    "SETTINGS",
    "BackendCpu",
    "GatedStart",
    "JobTableGate",
    "WorkerProcess",
    "bench_db_name",
    "child_env",
    "children_cpu_s",
    "die_with_parent",
    "drop_database",
    "git_head",
    "hold_bench_lock",
    "migrate_in_subprocess",
    "parent_gone",
    "process_cpu_s",
    "recreate_database",
    "server_url",
    "setup_django",
    "start_behind_gate",
    "wait_until_ready",
    "with_database",
]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
"""The server a bench uses when ``DATABASE_URL`` is not set."""
SETTINGS = "bench.bench_settings"
"""The settings module of the worker processes (the test settings + bench jobs)."""
GATE_SETTLE_S = 0.5  # after the last ready line, so every first claim waits on the gate
READY_TIMEOUT_S = 120
RSS_SAMPLE_S = 0.020
CONNECT_TIMEOUT_S = 5
_PREFIX_ENV = "BENCH_DB_PREFIX"
_NAME = re.compile(r"[a-z0-9_]*")
_MAX_NAME = 63  # PostgreSQL cuts longer identifiers: two names could meet


def fail(message: str) -> NoReturn:
    """Stop the bench with a one-line message on stderr and exit status 1."""
    raise SystemExit(f"bench: error: {message}")


# -- the server and the bench database ----------------------------------------


def redact(url: str) -> str:
    """``url`` with its password hidden, for messages: in the user part
    (``user:secret@``) and as a query parameter (``?password=secret``)."""
    url = re.sub(r"(://[^:/@]*):[^@/]+@", r"\1:***@", url)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def server_url(*databases: str) -> str:
    """The server URL the bench uses (``DATABASE_URL``, else ``DEFAULT_URL``).

    Says on stderr which server it is (as ``./dev`` does) and the bench's
    ``databases`` on it, after connecting to it once: an unparseable URL, a
    host that does not answer, a refused connection or a wrong password stop
    the bench with one line.
    """
    import psycopg

    from django_ultimate_jobs.dburl import database_from_url

    given = os.environ.get("DATABASE_URL", "").strip()
    url = given or DEFAULT_URL
    source = "DATABASE_URL" if given else "DATABASE_URL is not set: the default"
    try:
        database_from_url(url)
        urlsplit(url).port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as error:
        fail(f"bad DATABASE_URL {redact(url)!r}: {error}")
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            info = conn.info
            address = f"{info.host}:{info.port}"
    except psycopg.Error as error:
        fail(f"cannot connect to {redact(url)} ({source}): {_reason(error)}")
    stop_on_sigterm()
    named = f"; bench database {', '.join(databases)}" if databases else ""
    print(
        f"bench: using the PostgreSQL {version} server on {address} "
        f"({source} {redact(url)}){named}",
        file=sys.stderr,
        flush=True,
    )
    return url


def stop_on_sigterm() -> None:
    """Make SIGTERM stop the bench as Ctrl-C does: its worker processes get
    SIGTERM, then ``KeyboardInterrupt`` runs the bench's cleanup (the
    ``finally`` that drops a database the bench says it drops)."""

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM ends it at once
        for proc in list(_LIVE):
            if proc.popen.poll() is None:
                proc.popen.terminate()
        raise KeyboardInterrupt(f"signal {signum}")

    def one_line(kind: type, error: BaseException, trace: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            default_hook(kind, error, trace)
            return
        why = str(error) or "Ctrl-C"
        print(f"bench: stopped ({why})", file=sys.stderr)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        default_hook = sys.excepthook
        sys.excepthook = one_line


def _reason(error: Exception) -> str:
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return lines[0].removeprefix("connection failed: ")


def bench_db_name(name: str) -> str:
    """The name of a bench's database: ``name`` behind ``BENCH_DB_PREFIX``.

    The prefix (empty by default, so the names stay what they were) lets
    two people run the same bench against one server without dropping each
    other's database: ``BENCH_DB_PREFIX=alice_`` makes
    ``alice_ultimate_jobs_bench_tp``.
    """
    prefix = os.environ.get(_PREFIX_ENV, "")
    full = prefix + name
    if not _NAME.fullmatch(prefix):
        fail(f"{_PREFIX_ENV}={prefix!r}: use lower-case letters, digits and _ only")
    if len(full) > _MAX_NAME:
        fail(f"{_PREFIX_ENV}={prefix!r} makes {full!r}, longer than {_MAX_NAME} bytes")
    return full


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (query options such as host= kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def recreate_database(url: str, name: str) -> str:
    """Drop and create database ``name`` on ``url``'s server; answer its URL.

    Takes the bench lock on ``name`` first (``hold_bench_lock``), held until
    exit: a second run of the same bench waits rather than dropping the
    database under this one."""
    hold_bench_lock(url, name)
    _maintenance(url, name, create=True)
    return with_database(url, name)


def drop_database(url: str, name: str) -> None:
    """Drop database ``name`` if it exists."""
    _maintenance(url, name, create=False)


def _maintenance(url: str, name: str, *, create: bool) -> None:
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
            ident = sql.Identifier(name)
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident)
            )
            if create:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    except psycopg.Error as error:
        verb = "create" if create else "drop"
        fail(f"cannot {verb} database {name} on {redact(url)}: {_reason(error)}")


_LOCKS: dict[str, Any] = {}  # database name -> the connection holding its lock


def hold_bench_lock(url: str, name: str) -> Any:
    """Serialise runs of one bench on one server: a second run waits here
    rather than dropping database ``name`` under the first. The lock is held
    until exit by the answered connection (kept here too); a second call for
    ``name`` answers the same connection."""
    import psycopg

    if name in _LOCKS and not _LOCKS[name].closed:
        return _LOCKS[name]
    conn = psycopg.connect(url, autocommit=True)
    _LOCKS[name] = conn
    key = f"django-ultimate-jobs bench {name}"
    taken = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
    if not taken.fetchone()[0]:
        print(
            f"another run holds {name}; waiting for it to finish...",
            file=sys.stderr,
            flush=True,
        )
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
    return conn


def setup_django(bench_url: str) -> None:
    """Configure Django with the test settings on the bench database; migrate."""
    os.environ["DATABASE_URL"] = bench_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def migrate_in_subprocess(bench_url: str, settings: str = SETTINGS) -> None:
    """Migrate the bench database from a child process (``django migrate``),
    leaving this process's Django unconfigured."""
    subprocess.run(
        # --skip-checks: the checks run before the migrations and would warn
        # (ultimate_jobs.W101) that the fresh database is not migrated yet.
        [
            sys.executable,
            "-m",
            "django",
            "migrate",
            "--settings",
            settings,
            "-v",
            "0",
            "--skip-checks",
        ],
        cwd=ROOT,
        env=child_env(bench_url),
        check=True,
        preexec_fn=die_with_parent,
    )


_PR_SET_PDEATHSIG = 1
_OWN_PID = os.getpid()  # read by die_with_parent() in the forked child
try:  # resolved before any fork: the child only calls it
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: parent_gone() is the fallback
    _prctl = None


def die_with_parent() -> None:
    """``preexec_fn`` of a bench's child process: on Linux the kernel sends it
    SIGTERM when the bench dies (even by SIGKILL), so no worker outlives its
    bench holding connections. Elsewhere a no-op; the listen loops also
    watch ``parent_gone()``."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != _OWN_PID:  # the bench died between fork and prctl
        os._exit(1)


def parent_gone(parent: int) -> bool:
    """Whether the process that started this one (pid ``parent``) has exited
    (this process was re-parented)."""
    return os.getppid() != parent


def child_env(bench_url: str) -> dict[str, str]:
    """The environment of a worker process started on the bench database.

    The URL goes to the child in ``DATABASE_URL``, never on its command line,
    where ``ps`` would show its password to every user of the host."""
    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(
        DATABASE_URL=bench_url,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
    )
    return env


def git_head() -> str:
    """The measured commit, with ``+dirty`` when tracked files changed."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# -- CPU time -------------------------------------------------------------------


def children_cpu_s() -> float:
    """utime + stime of this process's reaped children (``RUSAGE_CHILDREN``)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process, from /proc (None if it is gone or
    unreadable, e.g. a server on another host)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BackendCpu:
    """CPU seconds spent by the bench database's other backends (the workers').

    PostgreSQL runs on this machine: the sampler lists the client backends
    of the bench database (except this process's own) and reads their utime
    + stime from /proc; a backend's last reading stands for its total.
    """

    def __init__(self, bench_url: str) -> None:
        import psycopg
        from django.db import connection

        self.conn = psycopg.connect(bench_url, autocommit=True)
        connection.ensure_connection()
        self.own = {self.conn.info.backend_pid, connection.connection.info.backend_pid}
        self.cpu_s: dict[int, float] = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        statement = (
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend'"
        )
        pids: set[int] = set()
        tick = 0
        # /proc of every backend seen is read every 5 ms (cheap), the list of
        # backends refreshed every 20 ms: a backend's end is missed by 5 ms
        # at most.
        while not self._stop.wait(0.005):
            if tick % 4 == 0:
                rows = self.conn.execute(statement).fetchall()
                pids.update(pid for (pid,) in rows if pid not in self.own)
            tick += 1
            for pid in list(pids):
                cpu_s = process_cpu_s(pid) or 0.0
                if cpu_s == 0.0 and pid in self.cpu_s:
                    pids.discard(pid)  # exited: its last reading stands
                    continue
                self.cpu_s[pid] = max(cpu_s, self.cpu_s.get(pid, 0.0))

    def stop(self) -> float:
        """Stop sampling; answer the CPU seconds of every backend seen."""
        self._stop.set()
        self.thread.join()
        self.conn.close()
        return sum(self.cpu_s.values())


# -- worker processes behind the gate ---------------------------------------------


_LIVE: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()  # for stop_on_sigterm


class WorkerProcess:
    """One worker subprocess: its ready line, its output, its peak RSS.

    ``ready_prefix`` is the start of the line the worker prints once it is
    ready (``"runjobs "``, ``"baseline ready"``). The peak RSS is its VmHWM
    (/proc/<pid>/status) read every 20 ms until it exits: not ``ru_maxrss``,
    which a child inherits from the parent it was forked from. With ``echo``,
    each line after the ready line is also printed to stderr behind it.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        ready_prefix: str,
        echo: str | None = None,
    ) -> None:
        self.ready_prefix = ready_prefix
        self.echo = echo
        self.ready = threading.Event()
        self.ready_at: float | None = None
        self.lines: list[str] = []
        self.spawned = time.time()
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=die_with_parent,
        )
        _LIVE.add(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.returncode: int | None = None
        self.max_rss_mib = 0.0
        self._reaped = threading.Event()
        self.sampler = threading.Thread(target=self._sample_rss, daemon=True)
        self.sampler.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if self.ready_at is None and line.startswith(self.ready_prefix):
                self.ready_at = time.time()
                self.ready.set()
            elif self.echo is not None and self.ready_at is not None:
                print(f"{self.echo}{line.rstrip()}", file=sys.stderr)
            self.lines.append(line.rstrip("\n"))

    def _sample_rss(self) -> None:
        # VmHWM only grows, so the last reading before exit is the peak.
        status = Path(f"/proc/{self.popen.pid}/status")
        while not self._reaped.wait(RSS_SAMPLE_S):
            try:
                text = status.read_text()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("VmHWM:"):
                    kib = int(line.split()[1])
                    self.max_rss_mib = max(self.max_rss_mib, kib / 1024)

    @property
    def startup_s(self) -> float | None:
        """Seconds from the spawn to the ready line (None: never ready)."""
        return None if self.ready_at is None else self.ready_at - self.spawned

    def wait(self, timeout: float) -> None:
        """Wait for the process to exit (killed after ``timeout``)."""
        try:
            self.returncode = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.returncode = self.popen.wait()
            self.lines.append("[bench] killed after the timeout")
        self._reaped.set()
        self.sampler.join(timeout=5)
        self.reader.join(timeout=5)

    def terminate(self, timeout: float = 30) -> None:
        """SIGTERM, then wait for the exit (killed after ``timeout``)."""
        self.popen.terminate()
        self.wait(timeout)

    def output(self) -> str:
        """Its last 40 lines of output, for an error message."""
        return "\n".join(self.lines[-40:])


def wait_until_ready(procs: list[WorkerProcess]) -> None:
    """Block until every process printed its ready line (error if one exits
    or READY_TIMEOUT_S passes first)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    for proc in procs:
        while not proc.ready.wait(0.1):
            if proc.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"a worker never became ready:\n{proc.output()}")


class JobTableGate:
    """ACCESS EXCLUSIVE on the job table: every first claim waits behind it."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)
        self.conn.execute("LOCK TABLE ultimate_jobs_job IN ACCESS EXCLUSIVE MODE")

    def open(self) -> float:
        """Release the lock; answer the moment (``time.time()``) of the commit."""
        opened = time.time()
        self.conn.commit()
        self.conn.close()
        return opened

    def close(self) -> None:
        """Release the lock if ``open()`` did not (on an error)."""
        if not self.conn.closed:
            self.conn.rollback()
            self.conn.close()


@dataclass(frozen=True)
class GatedStart:
    """What ``start_behind_gate`` answers: the processes, the gate's opening
    (``time.time()``) and the CPU seconds the processes spent booting."""

    procs: list[WorkerProcess]
    started: float
    boot_cpu_s: float


def start_behind_gate(
    bench_url: str, spawn: Callable[[], WorkerProcess], count: int
) -> GatedStart:
    """Start ``count`` workers with the job table locked; open it once all are ready.

    Each worker boots, prints its ready line and blocks in its first claim;
    GATE_SETTLE_S after the last ready line the gate opens, so the drain's
    start excludes Django's startup and the skew between the processes'
    startups. On an error every started process is killed.
    """
    gate = JobTableGate(bench_url)
    procs: list[WorkerProcess] = []
    try:
        procs = [spawn() for _ in range(count)]
        wait_until_ready(procs)
        time.sleep(GATE_SETTLE_S)
        boot_cpu_s = sum(process_cpu_s(p.popen.pid) or 0.0 for p in procs)
        started = gate.open()
    except BaseException:
        for proc in procs:
            proc.popen.kill()
        raise
    finally:
        gate.close()
    return GatedStart(procs, started, boot_cpu_s)
