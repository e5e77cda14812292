"""Conformance checks of the declared capability flags (``driver.features``).

A flag a driver declares is a promise callers rely on without asking
again; the flags that can be checked from outside are checked here, so a
driver that declares one it does not keep fails the shipped suite:

- ``wake_listener``: ``driver.wake_listener()`` answers a listener (not
  ``None``); ``runjobs`` refuses a driver that breaks this at start;
- ``joins_caller_transaction``: an enqueue inside ``transaction.atomic()``
  on ``driver.alias`` that rolls back leaves no job.

A flag the driver does not declare skips its check.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from ..drivers.base import EnqueueRequest, JobDriver

__all__ = ["FeaturesConformance"]


class _RolledBack(Exception):
    """Raised to roll the caller's transaction back."""


class FeaturesConformance:
    """Checks of ``driver.features`` (mixed into ``DriverConformance``)."""

    def test_a_declared_wake_listener_is_answered(self, driver: JobDriver) -> None:
        if not driver.features.wake_listener:
            pytest.skip("the driver declares no wake listener")
        listener = driver.wake_listener(
            lambda queue: None, worker_id="conformance-features"
        )
        assert listener is not None, "features.wake_listener, yet no listener"
        listener.stop()  # never started: stopping is idempotent

    def test_an_enqueue_rolled_back_with_the_caller_leaves_no_job(
        self, driver: JobDriver
    ) -> None:
        if not driver.features.joins_caller_transaction:
            pytest.skip("the driver does not join the caller's transaction")
        assert driver.alias is not None, "joins_caller_transaction needs an alias"
        enqueued = []
        with pytest.raises(_RolledBack), transaction.atomic(using=driver.alias):
            enqueued.append(
                driver.enqueue(
                    EnqueueRequest(
                        name="conformance.features.rolled_back",
                        queue="conformance-features",
                        input={},
                    )
                )
            )
            raise _RolledBack
        assert driver.get(enqueued[0].id) is None
