"""A project that skipped a setup step gets told which one, not a raw error.

Each case runs in a fresh interpreter with its own settings (INSTALLED_APPS
without an app), as a new project would start: ``django.setup()`` imports
the models, and ``enqueue()`` runs its first statement. The database is
the test server, seen through a ``search_path`` that holds no table, so the
jobs tables do not exist there whatever this suite migrated.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.child_python import last_json_line, run_python
from tests.support.workers import REPO_ROOT

pytestmark = pytest.mark.postgres

CONTRIB = ["django.contrib.contenttypes", "django.contrib.auth"]

SETTINGS = """
from tests.settings import DATABASES, SECRET_KEY, USE_TZ  # noqa: F401

INSTALLED_APPS = {apps!r}
# A schema that does not exist: no table resolves, as before `migrate`.
DATABASES["default"].setdefault("OPTIONS", {{}})["options"] = (
    "-c search_path=uj_no_such_schema"
)
"""

ENQUEUE = """
import json
import django

django.setup()
from django.db import transaction

from django_ultimate_jobs import JobsError, job


@job(name="newcomer.hello")
def hello(ctx):
    pass


try:
    with transaction.atomic():
        hello.enqueue()
except JobsError as error:
    print(json.dumps({"code": error.code, "cause": error.cause, "fix": error.fix}))
"""


def _run(tmp_path: Path, apps: list[str], script: str) -> subprocess.CompletedProcess:
    (tmp_path / "newcomer_settings.py").write_text(SETTINGS.format(apps=apps))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "newcomer_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)]),
    }
    return run_python(["-c", textwrap.dedent(script)], env=env, cwd=tmp_path)


def _refusal(done: subprocess.CompletedProcess) -> dict[str, str]:
    return last_json_line(done)


def test_forgetting_pgtrigger_says_what_to_add(tmp_path):
    """No pgtrigger in INSTALLED_APPS: a coded error naming it, not a Meta TypeError."""
    done = _run(
        tmp_path, [*CONTRIB, "django_ultimate_jobs"], "import django; django.setup()"
    )
    assert done.returncode == 1
    assert "TypeError" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "InstalledAppsIncomplete: X_INSTALLED_APPS_INCOMPLETE:" in last
    assert 'add "pgtrigger" to INSTALLED_APPS' in last


def test_enqueue_before_migrate_says_migrate(tmp_path):
    """The app is installed but its tables are not there: the fix is migrate."""
    refusal = _refusal(
        _run(tmp_path, [*CONTRIB, "pgtrigger", "django_ultimate_jobs"], ENQUEUE)
    )
    assert refusal["code"] == "X_JOBS_TABLES_MISSING"
    assert "ultimate_jobs_job" in refusal["cause"]
    assert refusal["fix"] == "python manage.py migrate ultimate_jobs"


def test_enqueue_without_the_app_says_install_it(tmp_path):
    """A job module imported while the app is not installed: add it, then migrate."""
    refusal = _refusal(_run(tmp_path, CONTRIB, ENQUEUE))
    assert refusal["code"] == "X_JOBS_TABLES_MISSING"
    assert "not in INSTALLED_APPS" in refusal["cause"]
    assert refusal["fix"] == (
        'add "pgtrigger" and "django_ultimate_jobs" to INSTALLED_APPS, '
        "then run python manage.py migrate"
    )
