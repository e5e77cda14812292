"""A fresh project's worker console names the job and the error (issue 26).

Without ``LOGGING``, the app's records reached Python's last-resort handler,
which prints the bare event name (``jobs.attempt.failed``). ``runjobs`` now
gives the app's logger a ``ConsoleFormatter`` handler on stderr when the
project routed it nowhere; a project's own ``LOGGING`` still wins.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection

from tests.jobsapp.jobs import always_fail
from tests.support.workers import REPO_ROOT, subprocess_env

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def burst(settings: str) -> str:
    """``runjobs --burst`` under ``settings``; answers its stderr."""
    env = {
        **subprocess_env(connection.settings_dict),
        "DJANGO_SETTINGS_MODULE": settings,
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--burst", "--no-scheduler"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def failed_lines(stderr: str) -> list[str]:
    """The lines about a failed attempt."""
    return [line for line in stderr.splitlines() if "jobs.attempt.failed" in line]


def test_without_logging_a_failure_line_names_the_job_and_the_error():
    """A settings module without LOGGING: the failure line names the job,
    its id and attempt, the error code and message; no bare event name."""
    enqueued = always_fail.enqueue(n=1)
    stderr = burst("tests.acceptance.nolog_settings")
    lines = failed_lines(stderr)
    assert lines, stderr
    first = lines[0]
    assert (
        " WARNING django_ultimate_jobs: jobs.attempt.failed job=tests.always_fail"
        in (first)
    ), first
    assert f"job_id={enqueued.id}" in first and "attempt=1" in first, first
    assert "code=X_APP_BROKEN" in first and "the gateway said no" in first, first
    assert "jobs.attempt.failed" not in [line.strip() for line in stderr.splitlines()]


def test_a_projects_logging_still_wins():
    """Under settings with LOGGING for the app (its own format, without the
    logger's name), each failure prints once, in the project's format."""
    always_fail.enqueue(n=2)
    stderr = burst("tests.acceptance.worker_settings")
    lines = failed_lines(stderr)
    assert lines, stderr
    assert all("django_ultimate_jobs: jobs.attempt.failed" not in li for li in lines)
    assert all("job=tests.always_fail" in li for li in lines), lines
