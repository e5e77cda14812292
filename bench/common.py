"""What the benches share: database URLs, worker environments, the commit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ROOT", "child_env", "git_head", "recreate_database", "with_database"]

ROOT = Path(__file__).resolve().parent.parent


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (query options such as host= kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def recreate_database(url: str, name: str) -> str:
    """Drop and create database ``name`` on ``url``'s server; answer its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(url, name)


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
