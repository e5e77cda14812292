"""Fixtures of the acceptance tier: real ``runjobs`` processes on the test DB.

Tests use ``transactional_db``: rows must be committed for a subprocess to
see them. ``fleet`` starts workers with short leases and kills every one of
them (process groups included) when the test ends, before pytest-django
flushes the tables.
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.support.workers import WorkerFleet, subprocess_env

# Lease timings of the crash tests: a lapsed lease comes back in ~2 s.
VISIBILITY = "2s"
HEARTBEAT = "500ms"


@pytest.fixture
def worker_env(transactional_db) -> dict[str, str]:
    """The environment of a worker subprocess on this test's database."""
    return {
        **subprocess_env(connection.settings_dict),
        "UJ_VISIBILITY": VISIBILITY,
        "UJ_HEARTBEAT": HEARTBEAT,
    }


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
