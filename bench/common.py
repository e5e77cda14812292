"""What the benches share: database URLs, worker environments, the commit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "ROOT",
    "child_env",
    "drop_database",
    "git_head",
    "hold_bench_lock",
    "recreate_database",
    "setup_django",
    "with_database",
]

ROOT = Path(__file__).resolve().parent.parent


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (query options such as host= kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def child_env(bench_url: str) -> dict[str, str]:
    """The environment of a worker process started on the bench database."""
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


def recreate_database(url: str, name: str) -> str:
    """Drop and create database ``name`` on ``url``'s server; answer its URL."""
    _maintenance(url, name, create=True)
    return with_database(url, name)


def drop_database(url: str, name: str) -> None:
    """Drop database ``name`` if it exists."""
    _maintenance(url, name, create=False)


def _maintenance(url: str, name: str, *, create: bool) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))


def hold_bench_lock(url: str, name: str) -> Any:
    """Serialise runs of one bench on one server: a second run waits here
    rather than dropping database ``name`` under the first. Keep the answered
    connection open until exit: the lock is held while it is."""
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
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
