"""The shipped suite catches a driver that declares a flag it does not keep."""

from __future__ import annotations

import uuid

import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs.testing.conformance_features import FeaturesConformance
from tests.drivers.broken import LyingTransaction, LyingWake
from tests.drivers.example import forget_store, open_store


@pytest.fixture
def store():
    name = f"liar-{uuid.uuid4().hex}"
    yield open_store(name)
    forget_store(name)


def test_a_lying_wake_listener_fails_the_suite(store):
    with pytest.raises(AssertionError, match="yet no listener"):
        FeaturesConformance().test_a_declared_wake_listener_is_answered(
            LyingWake(store)
        )


def test_a_lying_transaction_join_fails_the_suite(db, store):
    with pytest.raises(AssertionError):
        FeaturesConformance().test_an_enqueue_rolled_back_with_the_caller_leaves_no_job(
            LyingTransaction(store)
        )


def test_runjobs_refuses_a_lying_wake_listener_at_start(settings):
    settings.ULTIMATE_JOBS = {"DRIVER": "tests.drivers.broken.LyingWake"}
    with pytest.raises(CommandError, match="X_SETTINGS_INVALID") as refused:
        call_command("runjobs", "--burst", "--no-relay", "--no-scheduler")
    assert "wake_listener" in str(refused.value)
