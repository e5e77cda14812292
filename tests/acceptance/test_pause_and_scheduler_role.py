"""A paused queue in a running fleet, and the scheduler role of ``runjobs``.

- A paused queue's jobs are not claimed while the worker keeps claiming
  from its other queue, and are picked up within one poll of ``resume``.
- ``runjobs`` runs the scheduler thread (it arms the declared task and
  takes the leader lease); ``--no-scheduler`` turns it off; under
  ``--processes N`` only the supervisor runs it, once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_ultimate_jobs import operator
from django_ultimate_jobs.models import CronTask, Lease
from tests.jobsapp.jobs import noop
from tests.support.rows import db_now, job_row, state_of
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

IDLE_POLL_MAX = timedelta(milliseconds=200)  # worker_settings' UJ_IDLE_POLL_MAX
SCHEDULER_ENV = {"UJ_CRON_TASK": "1"}


def test_a_paused_queue_is_not_claimed_and_resumes_within_one_poll(fleet):
    """Polling only (--no-wake): the resume is seen by the next claim pass."""
    worker = fleet.start("--queues", "default,other", "--no-wake")
    worker.wait_for_output("runjobs ", timeout=30)
    operator.pause_queue("default")
    held = noop.enqueue(n=1).id
    # A job of the other queue, enqueued after: once it is done, claims
    # have passed over the paused queue's older job.
    passer = noop.using(queue="other").enqueue(n=2).id
    wait_until(lambda: state_of(passer) == "done", 30, message=fleet.logs)
    assert state_of(held) == "ready"
    resumed_at = db_now()
    operator.resume_queue("default")
    wait_until(lambda: state_of(held) == "done", 30, message=fleet.logs)
    waited = job_row(held).claimed_at - resumed_at
    # One idle poll, plus room for a loaded machine.
    assert waited <= IDLE_POLL_MAX + timedelta(milliseconds=800), waited


def test_runjobs_runs_the_scheduler_unless_told_not_to(fleet):
    """The task is armed and the lease held; --no-scheduler arms nothing."""
    quiet = fleet.start("--no-scheduler", env=SCHEDULER_ENV, name="quiet")
    quiet.wait_for_output("runjobs ", timeout=30)
    assert not CronTask.objects.exists()
    leading = fleet.start(env=SCHEDULER_ENV, name="leading")
    wait_until(
        lambda: CronTask.objects.filter(name="tests.cron.hourly").exists(),
        30,
        message=fleet.logs,
    )
    (lease,) = Lease.objects.filter(lease_key="ultimate_jobs:scheduler")
    assert f"-{leading.pid}-" in lease.holder
    (listed,) = [t for t in operator.tasks() if t["name"] == "tests.cron.hourly"]
    assert listed["armed"] and listed["next_run"].endswith(":00:00+00:00")


def test_a_supervisor_runs_one_scheduler_for_its_children(fleet):
    """--processes 2: the lease holder is the parent; children get --no-scheduler."""
    parent = fleet.start("--processes", "2", env=SCHEDULER_ENV, name="parent")
    wait_until(lambda: len(parent.children()) == 2, 30, message=fleet.logs)
    wait_until(
        lambda: Lease.objects.filter(lease_key="ultimate_jobs:scheduler").exists(),
        30,
        message=fleet.logs,
    )
    (lease,) = Lease.objects.filter(lease_key="ultimate_jobs:scheduler")
    assert f"-{parent.pid}-" in lease.holder
