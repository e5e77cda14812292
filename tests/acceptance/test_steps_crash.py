"""Durable steps across crashes, with real ``runjobs`` processes."""

from __future__ import annotations

import pytest

from django_ultimate_jobs.faults import AFTER_STEP_COMMIT
from tests.jobsapp.jobs import atomic_steps
from tests.support.rows import effects_of, job_row, state_of
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PICKUP_S = 20.0


def test_an_atomic_step_committed_just_before_a_crash_runs_exactly_once(fleet):
    """SIGKILL-like exit right after the step's commit: its rows exist once.

    The fault point ends the process after the first atomic step's record
    and its effect row committed together. The next worker (after the lease
    lapses) replays that step from storage and runs only the second one.
    """
    job_id = atomic_steps.enqueue(order="o-1").id
    crashing = fleet.start(
        env={"ULTIMATE_JOBS_FAULTS": f"{AFTER_STEP_COMMIT}=exit"}, name="a"
    )
    assert crashing.wait_exit(timeout=PICKUP_S) == 137, crashing.tail()
    assert [e.kind for e in effects_of(job_id, "reserve:o-1")] == ["reserve:o-1"]

    fleet.start(name="b")
    wait_until(lambda: state_of(job_id) == "done", PICKUP_S, message=fleet.logs)
    row = job_row(job_id)
    assert row.attempt == 2
    assert [e.kind for e in effects_of(job_id, "reserve:o-1")] == ["reserve:o-1"]
    assert [e.kind for e in effects_of(job_id, "charge:o-1")] == ["charge:o-1"]
