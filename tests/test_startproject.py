"""The first hour, followed literally: a fresh ``django-admin startproject``.

The README's install and quick start, and the embedded-database how-to
(docs/reference/commands.md, ``jobs_devdb``), run block by block in real
subprocesses (tests/support/startproject.py), with no step the docs do not
write: settings edited as written, the app created and listed, migrate, an
enqueue from ``manage.py shell -c``, ``runjobs --burst``, ``jobs ls``. The
job must end ``done`` in the database.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.example import scratch_database
from tests.support.startproject import FreshProject, doc_blocks, project_env

pytestmark = [pytest.mark.postgres, pytest.mark.acceptance]

INSTALL = doc_blocks("README.md", "Install in a project")
QUICK_START = doc_blocks("README.md", "Quick start")
JOBS_DEVDB = [
    block
    for block in doc_blocks("docs/reference/commands.md", "`jobs_devdb`")
    if block.lang  # the untagged block is the synopsis, not a step
]


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder under /tmp (as root the embedded server runs as another user,
    who must traverse every parent folder; pytest's tmp_path is 0700)."""
    with tempfile.TemporaryDirectory(prefix="uj-startproject-") as path:
        yield Path(path)


def _welcome_jobs(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT state, attempt FROM ultimate_jobs_job "
            "WHERE name = 'accounts.send_welcome'"
        ).fetchall()
    return [(state, attempt) for state, attempt in rows]


def _ran_the_quick_start(project: FreshProject, url: str) -> None:
    ran = [done for block in QUICK_START for done in project.follow(block)]
    shell, burst, listing = ran[-3:]
    assert "shell" in shell.args and "runjobs" in burst.args, project.log()
    assert "welcome mail for user 1, attempt 1" in burst.stdout, project.log()
    assert "accounts.send_welcome" in listing.stdout and "done" in listing.stdout
    assert _welcome_jobs(url) == [("done", 1)], project.log()


@pytest.mark.timeout(600)
def test_the_readme_install_and_quick_start_work_in_a_fresh_startproject(folder):
    """Every block of the two sections, in order, on a scratch PostgreSQL.

    The README left two steps out: DATABASES must be PostgreSQL (a new
    project's SQLite stops migrate with E003) and the app holding jobs.py
    must be in INSTALLED_APPS (else the job is parked X_JOB_UNKNOWN).
    """
    with scratch_database() as url:
        project = FreshProject(folder, project_env(DATABASE_URL=url))
        for block in INSTALL:
            project.follow(block)
        _ran_the_quick_start(project, url)


@pytest.mark.timeout(300)
def test_sqlite_stops_migrate_with_a_fix_that_names_databases(folder):
    """The newcomer's mistake: the apps added, DATABASES left as SQLite.
    E003's fix pointed at ULTIMATE_JOBS['DATABASE'] or the memory driver;
    it names DATABASES first now."""
    project = FreshProject(folder, project_env())
    project.add_settings(
        'INSTALLED_APPS = [\n    # ...\n    "pgtrigger",\n    "django_ultimate_jobs",\n]'
    )
    done = project.manage("migrate", check=False)
    assert done.returncode != 0
    assert "ultimate_jobs.E003" in done.stderr, project.log()
    assert "the 'default' database is sqlite" in done.stderr
    assert "HINT: point DATABASES['default'] at PostgreSQL" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_embedded_database_how_to_works_in_a_fresh_startproject(folder):
    """commands.md's jobs_devdb steps, after the README's settings: with
    ``os.environ["DATABASE_URL"]`` in the settings, ``manage.py jobs_devdb``
    died with KeyError before it could print the URL to export."""
    settings = [b for b in INSTALL if b.text.startswith("# settings.py")]
    assert len(settings) == 1
    project = FreshProject(folder, project_env())  # no DATABASE_URL yet
    try:
        project.follow(settings[0])
        for block in JOBS_DEVDB:
            project.follow(block)
        url = project.env["DATABASE_URL"]
        assert url.startswith("postgresql://postgres@/myproject?host="), url
        _ran_the_quick_start(project, url)
    finally:
        project.manage("jobs_devdb", "--stop", check=False)
