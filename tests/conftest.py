"""Shared fixtures: drivers over a real PostgreSQL and in memory, a clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

# Before the package is imported: every module of the conformance suite
# (conformance, conformance_operator, _bulk, _cron, ...) shows what a failed
# check compared. The one line docs/howto/testing.md gives driver authors.
pytest.register_assert_rewrite("django_ultimate_jobs.testing")

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.postgres import PostgresDriver

# Fault-test apparatus (tests/support): a scratch server a test may crash,
# a proxy that cuts connections. Imported here so every test can ask for them.
from tests.support.scratch_pg import (  # noqa: F401
    scratch_db,
    scratch_pg,
    scratch_pg_server,
)

# The data-subject tests' fixtures (tests/test_subjects*.py).
from tests.support.subjects import (  # noqa: F401
    declare_subject,
    memory_storage,
    personal_marks,
)
from tests.support.tcp_proxy import tcp_proxy  # noqa: F401
from tests.support.webhooks import declare_webhook, hooks, server  # noqa: F401


@pytest.fixture(autouse=True)
def _no_dead_connection_carried_over():
    """A test that killed this process's own backend (a fault test matching
    too wide) must not fail every later test with "the connection is
    closed": a dead connection is dropped before each test, so the next
    use reconnects. The failing test still fails by itself."""
    from django.db import connections

    for wrapper in connections.all(initialized_only=True):
        raw = wrapper.connection
        if raw is not None and raw.closed and not wrapper.in_atomic_block:
            wrapper.close()
    yield


@pytest.fixture
def clock() -> ManualClock:
    """A frozen clock, moved by tests (leases lapse without sleeping)."""
    return ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def recorder():
    """Tracing on in this process, its spans kept in memory, until the test ends.

    The SDK provider is pinned (``tracing.reset(provider)``), not made global:
    OpenTelemetry takes one global provider per process, and later tests must
    find tracing off again (tests/support/spans.py).
    """
    from django_ultimate_jobs import tracing
    from tests.support.spans import Recorder

    recorded = Recorder()
    tracing.reset(recorded.provider)
    try:
        yield recorded
    finally:
        tracing.reset()
        recorded.provider.shutdown()


@pytest.fixture
def pg_driver(db, clock):
    """The Postgres driver on the test database, installed for the test."""
    driver = PostgresDriver(clock=clock)
    previous = set_driver(driver)
    yield driver
    set_driver(previous)


@pytest.fixture
def committed_pg_driver(transactional_db):
    """The Postgres driver on the database clock, with committed rows.

    For tests whose other threads or connections must see the rows (real
    worker threads, racing connections, transaction boundaries).
    """
    driver = PostgresDriver()
    previous = set_driver(driver)
    yield driver
    set_driver(previous)


@pytest.fixture
def declare_jobs():
    """Declare jobs inside a test; every one is unregistered afterwards.

    ``declare_jobs(queue, prefix)(**job_options)`` returns a decorator that
    names the job ``<prefix>.<function name>`` on ``queue``.
    """
    from django_ultimate_jobs import job
    from django_ultimate_jobs.registry import unregister

    names: list[str] = []

    def for_queue(queue: str, prefix: str, **defaults):
        def declare(**options):
            options = {**defaults, **options}

            def wrap(func):
                handle = job(name=f"{prefix}.{func.__name__}", queue=queue, **options)(
                    func
                )
                names.append(handle.name)
                return handle

            return wrap

        return declare

    yield for_queue
    for name in names:
        unregister(name)
