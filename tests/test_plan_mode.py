"""Which connections the driver switches to generic plans.

Only the worker's claim loop: on any other connection the session setting
would also govern the caller's own parameterized statements (and our
operator listing, whose optional filters need a plan per call).
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from django_ultimate_jobs.drivers.base import ClaimOptions, JobFilter
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.states import JobState

pytestmark = pytest.mark.postgres


def plan_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return cursor.fetchone()[0]


def claim_once(driver: PostgresDriver) -> None:
    driver.claim(
        ClaimOptions(queues=("plans",), limit=1, worker_id="w", visibility_ms=30_000)
    )


def test_a_callers_connection_keeps_the_default_plan_mode(transactional_db):
    driver = PostgresDriver()
    claim_once(driver)
    driver.list_jobs(
        JobFilter(states=frozenset({JobState.DEAD})), before=None, limit=10
    )
    assert plan_mode() == "auto"


def test_the_claim_loop_thread_plans_generically(transactional_db):
    driver = PostgresDriver()
    seen: list[str] = []

    def claim_loop() -> None:
        try:
            driver.use_generic_plans_in_this_thread()
            claim_once(driver)
            seen.append(plan_mode())
        finally:
            connections.close_all()

    thread = threading.Thread(target=claim_loop)
    thread.start()
    thread.join(30)

    assert seen == ["force_generic_plan"]
    assert plan_mode() == "auto"  # this thread's connection is untouched
