"""Fixtures of the acceptance tier: real ``runjobs`` processes on the test DB.

Tests use ``transactional_db``: rows must be committed for a subprocess to
see them. ``fleet`` starts workers with short leases and kills every one of
them (process groups included) when the test ends, before pytest-django
flushes the tables.
"""

from __future__ import annotations

import os

import pytest
from django.db import connection

from tests.support.workers import REPO_ROOT, WorkerFleet, database_url

# Lease timings of the crash tests: a lapsed lease comes back in ~2 s.
VISIBILITY = "2s"
HEARTBEAT = "500ms"


@pytest.fixture
def worker_env(transactional_db) -> dict[str, str]:
    """The environment of a worker subprocess on this test's database."""
    settings_dict = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.acceptance.worker_settings",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
        ),
        "DATABASE_URL": database_url(settings_dict),
        "ULTIMATE_JOBS_TEST_DB_NAME": str(settings_dict["NAME"]),
        "UJ_VISIBILITY": VISIBILITY,
        "UJ_HEARTBEAT": HEARTBEAT,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("ULTIMATE_JOBS_FAULTS", None)
    return env


@pytest.fixture
def fleet(worker_env, tmp_path):
    """Start ``runjobs`` processes; all are killed when the test ends."""
    workers = WorkerFleet(worker_env, tmp_path)
    try:
        yield workers
    finally:
        workers.kill_all()
        # Shown by pytest only when the test failed.
        print(workers.logs())
