"""``manage.py runjobs`` subprocesses for the acceptance tier.

Every process is started in its own session (process group), so the fleet's
``kill_all`` takes a supervisor's children down with it, and a SIGSTOPped
process is resumed before it is killed. Output goes to one log file per
process (a pipe could fill and block the worker); failures attach its tail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

from django_ultimate_jobs.dburl import database_from_url

from .waiting import wait_until

__all__ = [
    "REPO_ROOT",
    "WorkerFleet",
    "WorkerProcess",
    "assert_recovered_quietly",
    "database_url",
    "django_command",
    "subprocess_env",
    "subprocess_env_for_url",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS_MODULE = "tests.acceptance.worker_settings"


def database_url(settings_dict: Mapping[str, object]) -> str:
    """The URL of the database a Django settings dict points at."""
    user = quote(str(settings_dict.get("USER") or ""))
    password = quote(str(settings_dict.get("PASSWORD") or ""))
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    host = str(settings_dict.get("HOST") or "127.0.0.1")
    port = settings_dict.get("PORT") or 5432
    name = quote(str(settings_dict["NAME"]))
    if host.startswith("/"):
        # A Unix socket directory (the embedded server): it goes in ?host=,
        # as database_from_url() reads it.
        return f"postgresql://{auth}/{name}?host={quote(host, safe='/')}&port={port}"
    return f"postgresql://{auth}{host}:{port}/{name}"


def subprocess_env(settings_dict: Mapping[str, object]) -> dict[str, str]:
    """The environment of a subprocess on the test database (worker settings).

    The subprocess sees only committed rows: use it from tests on
    ``transactional_db``.
    """
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
        ),
        "DATABASE_URL": database_url(settings_dict),
        "ULTIMATE_JOBS_TEST_DB_NAME": str(settings_dict["NAME"]),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("ULTIMATE_JOBS_FAULTS", None)
    return env


def subprocess_env_for_url(url: str, **extra: str) -> dict[str, str]:
    """:func:`subprocess_env` on the database at ``url``, plus ``extra``.

    For a database outside the test's own (a scratch server's, or the test
    database through a proxy). The URL is passed on as is, so its query
    options reach the subprocess too.
    """
    env = subprocess_env(database_from_url(url))
    return {**env, "DATABASE_URL": url, **extra}


def django_command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m django *args`` with the test settings, as a shell would.

    For what a command prints and its exit status (never checked here);
    it touches no database unless the command does.
    """
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class WorkerProcess:
    """One ``runjobs`` process (a worker, or a supervisor with children)."""

    def __init__(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path
    ):
        self.name = name
        self.argv = list(argv)
        self.log_path = log
        self.started = time.monotonic()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env=dict(env),
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.stopped = False

    def __repr__(self) -> str:
        return f"<WorkerProcess {self.name} pid={self.pid} rc={self.proc.returncode}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        text = self.output().splitlines()[-lines:]
        return (
            f"--- {self.name} (pid {self.pid}, rc {self.proc.poll()}) ---\n"
            + "\n".join(text)
        )

    def send(self, sig: signal.Signals) -> None:
        """Send ``sig`` to this process only (not its children)."""
        if self.alive():
            os.kill(self.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self) -> int:
        """SIGKILL this process only and reap it; answers the exit code."""
        self.send(signal.SIGKILL)
        return self.proc.wait(timeout=10)

    def wait_exit(self, timeout: float) -> int:
        """Wait (with a deadline) for the process to exit by itself."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s\n{self.tail()}"
            ) from None

    def wait_for_output(self, text: str, timeout: float) -> None:
        """Wait until ``text`` appears in the process's log."""
        wait_until(
            lambda: text in self.output(),
            timeout,
            message=lambda: f"waiting for {text!r} in the log\n{self.tail()}",
        )

    def children(self) -> list[int]:
        """Pids of the live direct children (a supervisor's workers)."""
        try:
            kids = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        return sorted(k.pid for k in kids if k.status() != psutil.STATUS_ZOMBIE)

    def terminate_group(self) -> None:
        """SIGKILL the whole process group (children included) and reap."""
        # Started with start_new_session: the group id is the pid, and the
        # group outlives a reaped leader (orphaned children stay in it).
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class WorkerFleet:
    """Starts ``runjobs`` processes for one test and kills all of them after."""

    def __init__(self, base_env: Mapping[str, str], log_dir: Path):
        self.base_env = dict(base_env)
        self.log_dir = log_dir
        self.processes: list[WorkerProcess] = []

    def start(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        manage_py: bool = False,
    ) -> WorkerProcess:
        """Start ``python -m django runjobs *args`` with the fleet's environment.

        ``manage_py`` starts it as ``python tests/acceptance/manage.py
        runjobs *args`` instead, the way a project runs it.
        """
        name = name or f"worker-{len(self.processes) + 1}"
        if manage_py:
            entry = [str(REPO_ROOT / "tests" / "acceptance" / "manage.py")]
        else:
            entry = ["-m", "django"]
        argv = [sys.executable, *entry, "runjobs", *args]
        merged = {**self.base_env, **(env or {})}
        process = WorkerProcess(name, argv, merged, self.log_dir / f"{name}.log")
        self.processes.append(process)
        return process

    def logs(self) -> str:
        """The tail of every process's log (for failure messages)."""
        return "\n".join(p.tail() for p in self.processes)

    def kill_all(self) -> None:
        """Kill every process (and process group) this fleet started."""
        for process in self.processes:
            process.terminate_group()


def start_worker_thread(worker: Any, name: str = "worker") -> threading.Thread:
    """Run ``worker.run()`` in a daemon thread (its Django connections closed
    when it ends), started; the test stops it with ``request_stop``."""
    from django.db import connections

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def assert_recovered_quietly(worker: WorkerProcess) -> None:
    """After one role lost its connection: the worker lives, logged the
    outage at most once each way, and lost no settle, tick, wake proof or
    leadership over it (a failed lease renewal is not another holder)."""
    log = worker.output()
    assert "jobs.wake.unverified" not in log
    assert "settle-failed" not in log and "tick-failed" not in log
    assert log.count("jobs.db.lost") <= 1 and log.count("jobs.db.recovered") <= 1
    assert "leadership-lost" not in log
    assert worker.alive()
