"""Fixtures of the acceptance tier: real ``runjobs`` processes on the test DB.

Tests use ``transactional_db``: rows must be committed for a subprocess to
see them. ``fleet`` starts workers with short leases and kills every one of
them (process groups included) when the test ends, before pytest-django
flushes the tables.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.support.workers import WorkerFleet, subprocess_env, subprocess_env_for_url

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


@pytest.fixture
def proxied_fleet(tcp_proxy, tmp_path) -> Iterator[tuple[WorkerFleet, object]]:
    """Workers that reach the test database through a proxy the test can cut."""
    proxy = tcp_proxy.for_settings(connection.settings_dict)
    url = proxy.url_for(str(connection.settings_dict["NAME"]))
    fleet = WorkerFleet(subprocess_env_for_url(url, UJ_VISIBILITY="30s"), tmp_path)
    try:
        yield fleet, proxy
    finally:
        fleet.kill_all()
        print(fleet.logs())
