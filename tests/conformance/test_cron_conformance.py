"""The cron-task conformance checks on both drivers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.testing.conformance_cron import CronConformance


@pytest.fixture
def clock():
    return ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


@pytest.mark.postgres
class TestPostgresCron(CronConformance):
    """On PostgreSQL (each test rolled back)."""

    @pytest.fixture
    def driver(self, db, clock):
        return PostgresDriver(clock=clock)


class TestMemoryCron(CronConformance):
    """On the memory driver."""

    @pytest.fixture
    def driver(self, clock):
        driver = MemoryDriver(clock=clock)
        yield driver
        driver.close()
