"""Shared fixtures: drivers over a real PostgreSQL and in memory, a clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.postgres import PostgresDriver


@pytest.fixture
def clock() -> ManualClock:
    """A frozen clock, moved by tests (leases lapse without sleeping)."""
    return ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def pg_driver(db, clock):
    """The Postgres driver on the test database, installed for the test."""
    driver = PostgresDriver(clock=clock)
    previous = set_driver(driver)
    yield driver
    set_driver(previous)
