"""Fixtures of the webhook tests: loopback allowed, a scripted endpoint.

Import the fixtures a test module uses (``from tests.support.webhooks
import hooks, server  # noqa: F401``).
"""

from __future__ import annotations

import pytest

from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.retry import Retry
from django_ultimate_jobs.webhooks import webhook
from django_ultimate_jobs.webhooks.declaration import _HANDLES

from .webhook_server import HookServer

__all__ = ["LOOPBACK", "declare_webhook", "hooks", "server"]

LOOPBACK = {
    "QUEUES": ["default"],
    "WEBHOOK_ALLOW_NETWORKS": ["127.0.0.0/8"],
    "WEBHOOK_ALLOW_HTTP": True,
}
"""Settings that let the sender reach a server on 127.0.0.0/8 over http."""


@pytest.fixture
def hooks(db, settings, clock):
    """Loopback allowed, then the Postgres driver with a frozen clock."""
    settings.ULTIMATE_JOBS = LOOPBACK  # resets the driver: install one after
    driver = PostgresDriver(clock=clock)
    previous = set_driver(driver)
    yield driver
    set_driver(previous)


@pytest.fixture
def server():
    """A scripted HTTP endpoint on 127.0.0.1 (answers 200 unless scripted)."""
    with HookServer() as running:
        yield running


@pytest.fixture
def declare_webhook():
    """``declare_webhook(suffix, **options)``: a ``webhook(...)`` for one test."""
    names = []

    def declare(suffix, **options):
        name = f"tests.webhook.{suffix}"
        options.setdefault("retry", Retry(attempts=5, delay="1s", max_delay="1m"))
        handle = webhook(name=name, **options)
        names.append(name)
        return handle

    yield declare
    for name in names:
        unregister(name)
        _HANDLES.pop(name, None)
