"""The built-in housekeeping jobs have a queue of their own.

``ultimate_jobs.retention`` and ``ultimate_jobs.partitions`` go to
``HOUSEKEEPING_QUEUE`` (default ``ultimate_jobs``), never to an app's
queue: a wait for "the default queue is drained" never sees them. That every
``runjobs`` serves it (unless ``--no-housekeeping``) is proven on real
processes in tests/acceptance/test_housekeeping_queue.py.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_ultimate_jobs import operator
from django_ultimate_jobs.errors import SettingsInvalid
from django_ultimate_jobs.maintenance.builtin import (
    PARTITIONS_JOB,
    RETENTION_JOB,
    partitions,
    retention,
)
from django_ultimate_jobs.testing import run_jobs, run_scheduler

pytestmark = pytest.mark.postgres

LIVE = ["ready", "delayed", "running", "suspended"]


def test_a_fired_retention_job_never_shows_on_the_default_queue(pg_driver, clock):
    """The scheduler's retention job waits on ultimate_jobs; default stays drained."""
    assert run_scheduler() == []  # arms the built-in tasks
    clock.advance(minutes=90)
    assert [f.task for f in run_scheduler()] == [RETENTION_JOB]
    assert operator.count(queue="default", states=LIVE) == 0
    assert run_jobs(queues=["default"]) == []
    assert operator.count(queue="ultimate_jobs", name=RETENTION_JOB) == 1
    # run_jobs() with no queues drains every queue a declared job uses.
    (execution,) = run_jobs()
    assert (execution.claimed.name, execution.outcome) == (RETENTION_JOB, "completed")


def test_the_housekeeping_queue_follows_the_setting(pg_driver):
    """HOUSEKEEPING_QUEUE moves both built-in jobs, read at each enqueue."""
    with override_settings(ULTIMATE_JOBS={"HOUSEKEEPING_QUEUE": "maintenance"}):
        assert (retention.queue, partitions.queue) == ("maintenance", "maintenance")
        retention.enqueue()
        assert operator.count(queue="maintenance", name=RETENTION_JOB) == 1
        assert retention.describe()["queue"] == "maintenance"
    partitions.enqueue()
    assert operator.count(queue="ultimate_jobs", name=PARTITIONS_JOB) == 1


@pytest.mark.parametrize("value", ["", " ops", 7, ["ops"], "a\nb"])
def test_a_bad_housekeeping_queue_is_refused(value):
    """The setting must be a queue name a job could be declared with."""
    from django_ultimate_jobs.conf import parse_settings

    with pytest.raises(SettingsInvalid, match="HOUSEKEEPING_QUEUE"):
        parse_settings({"HOUSEKEEPING_QUEUE": value})


def test_a_tasks_backend_may_use_the_housekeeping_queue_unwarned(pg_driver):
    """W103 names the queues no runjobs claims: the housekeeping queue is claimed."""
    from django_ultimate_jobs.backends import UltimateJobsBackend

    found = UltimateJobsBackend("x", {"QUEUES": ["default", "ultimate_jobs", "sms"]})
    (warning,) = found.check()
    assert "allows the queues sms, which" in warning.msg
