"""Crash, stall and drain of real ``runjobs`` processes (I-OWED, I-FENCE).

Workers run with a 2 s lease renewed every 500 ms (see conftest), so a
worker that dies or stalls loses its jobs ~2 s later. Every wait is a
polled condition with a deadline (tests/support/waiting.py); the bodies of
``tests.slow`` and ``tests.hang`` block until the test removes a flag file.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from django_ultimate_jobs.faults import AFTER_CLAIM_COMMIT
from django_ultimate_jobs.worker.lifecycle import DRAIN_CANCEL_MARGIN_S
from tests.jobsapp.jobs import effect, hang, hang_two, poison, slow
from tests.jobsapp.models import Effect
from tests.support.history import EffectRow, lease_overlaps
from tests.support.rows import db_now, effects_of, job_row, state_of
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# How long a worker gets to pick up work it can see (startup included).
PICKUP_S = 20.0


def _flag(tmp_path: Path, name: str = "hold") -> Path:
    flag = tmp_path / name
    flag.write_text("hold")
    return flag


def _claimed(job_id, claim: int, kind: str = "start"):
    """A predicate: the job's body ran under claim ``claim``."""

    def claimed() -> bool:
        return any(e.claims == claim for e in effects_of(job_id, kind))

    claimed.__name__ = f"job_{job_id}_ran_under_claim_{claim}"
    return claimed


def _state_is(job_id, state: str):
    def reached() -> bool:
        return state_of(job_id) == state

    reached.__name__ = f"job_{job_id}_is_{state}"
    return reached


def _drain_window(deadline_s: float) -> tuple[float, float]:
    """(cut-off, hand-back) seconds after SIGTERM, as the worker computes them."""
    margin = min(DRAIN_CANCEL_MARGIN_S, deadline_s / 2)
    return deadline_s - margin, deadline_s - margin / 2


def test_sigkill_mid_job_reruns_on_another_worker(fleet, tmp_path):
    flag = _flag(tmp_path)
    job_id = hang.enqueue(flag=str(flag)).id
    first = fleet.start(name="first")
    wait_until(_claimed(job_id, 1), PICKUP_S, message=fleet.logs)

    first.kill()
    lease = job_row(job_id)
    assert (lease.state, lease.attempt, lease.claims) == ("running", 1, 1)
    flag.unlink()  # the next run may finish
    second = fleet.start(name="second")
    wait_until(_state_is(job_id, "done"), PICKUP_S, message=fleet.logs)

    row = job_row(job_id)
    assert (row.attempt, row.claims, row.claimed_by) == (2, 2, None)
    runs = effects_of(job_id, "start")
    assert [e.claims for e in runs] == [1, 2]
    assert [e.attempt for e in runs] == [1, 2]
    assert runs[0].worker != runs[1].worker
    assert f":{first.pid}:" in runs[0].worker
    assert f":{second.pid}:" in runs[1].worker
    # Re-claimed only once the dead worker's lease lapsed (database clock).
    assert runs[1].at >= lease.visible_at
    assert lease_overlaps(EffectRow.of(e) for e in runs) == []


def test_worker_dying_on_the_final_attempt_buries_the_job(fleet, tmp_path):
    flag = _flag(tmp_path)  # never removed: every run hangs until killed
    job_id = hang_two.enqueue(flag=str(flag)).id
    for claim in (1, 2):
        doomed = fleet.start(name=f"doomed-{claim}")
        wait_until(_claimed(job_id, claim), PICKUP_S, message=fleet.logs)
        doomed.kill()
    assert (job_row(job_id).state, job_row(job_id).attempt) == ("running", 2)

    reaper = fleet.start(name="reaper")
    wait_until(_state_is(job_id, "dead"), PICKUP_S, message=fleet.logs)
    row = job_row(job_id)
    assert row.last_error.startswith("X_JOB_LEASE_LOST"), row.last_error
    assert (row.attempt, row.claims, row.claimed_by) == (2, 2, None)

    # Never run again: a job enqueued after the burial runs on the same
    # worker (so it kept claiming), and the buried job gained no run.
    later = effect.enqueue().id
    wait_until(_state_is(later, "done"), PICKUP_S, message=fleet.logs)
    assert [e.claims for e in effects_of(job_id)] == [1, 2]
    assert state_of(job_id) == "dead"
    assert "jobs.claim.exhausted" in reaper.output()


def test_sigterm_hands_a_cooperative_job_back_uncounted(fleet, tmp_path):
    flag = _flag(tmp_path)
    job_id = slow.enqueue(seconds=30, flag=str(flag)).id
    worker = fleet.start("--shutdown-deadline", "1.5", name="draining")
    wait_until(_claimed(job_id, 1), PICKUP_S, message=fleet.logs)
    assert job_row(job_id).attempt == 1

    sent = time.monotonic()
    worker.send(signal.SIGTERM)
    code = worker.wait_exit(timeout=15)
    exited_after = time.monotonic() - sent
    print(f"drain: cooperative job, worker exited {exited_after:.2f}s after SIGTERM")
    assert code == 0, worker.tail()
    assert exited_after < 3.0, worker.tail()

    row = job_row(job_id)
    assert (row.state, row.attempt, row.claims, row.claimed_by) == ("ready", 0, 1, None)
    assert "X_DRAINING" in row.last_error, row.last_error
    assert effects_of(job_id, "end") == []

    flag.unlink()
    fleet.start(name="second")
    wait_until(_state_is(job_id, "done"), PICKUP_S, message=fleet.logs)
    row = job_row(job_id)
    assert (row.attempt, row.claims) == (1, 2)
    assert [(e.kind, e.claims, e.attempt) for e in effects_of(job_id)] == [
        ("start", 1, 1),
        ("start", 2, 1),
        ("end", 2, 1),
    ]


def test_sigterm_hands_back_a_job_ignoring_cancellation_by_the_deadline(
    fleet, tmp_path
):
    deadline = 1.5
    cutoff, handback = _drain_window(deadline)
    flag = _flag(tmp_path)
    job_id = hang.enqueue(flag=str(flag)).id
    worker = fleet.start("--shutdown-deadline", str(deadline), name="draining")
    wait_until(_claimed(job_id, 1), PICKUP_S, message=fleet.logs)

    signalled_at = db_now()
    sent = time.monotonic()
    worker.send(signal.SIGTERM)
    code = worker.wait_exit(timeout=15)
    exited_after = time.monotonic() - sent

    row = job_row(job_id)
    handed_after = (row.updated_at - signalled_at).total_seconds()
    print(
        f"drain: hung job handed back {handed_after:.2f}s after SIGTERM "
        f"(hand-back due {handback:.2f}s), worker exited {exited_after:.2f}s "
        f"after SIGTERM (deadline {deadline}s)"
    )
    assert (row.state, row.attempt, row.claims, row.claimed_by) == ("ready", 0, 1, None)
    assert "X_DRAINING" in row.last_error, row.last_error
    assert cutoff <= handed_after <= deadline, handed_after
    assert code == 0, worker.tail()
    # Exits by itself by the deadline; 0.5 s covers signal delivery and
    # interpreter teardown.
    assert exited_after <= deadline + 0.5, worker.tail()


def test_stalled_worker_cannot_write_after_its_job_was_reclaimed(fleet, tmp_path):
    """SIGSTOP past the lease: the job moves on; the resumed body is fenced.

    Checked here: the settle, the progress write and a fenced external write
    (``record_progress`` with the stale claim identity). Durable steps do not
    exist yet: their write fence gets the same test when they land.
    """
    flag = _flag(tmp_path)
    job_id = hang.enqueue(flag=str(flag), probe=True).id
    stalled = fleet.start(name="stalled")
    wait_until(_claimed(job_id, 1), PICKUP_S, message=fleet.logs)
    stalled.send(signal.SIGSTOP)

    rescuer = fleet.start(name="rescuer")
    wait_until(_claimed(job_id, 2), PICKUP_S, message=fleet.logs)
    flag.unlink()
    wait_until(_state_is(job_id, "done"), PICKUP_S, message=fleet.logs)
    finished = job_row(job_id)
    assert (finished.attempt, finished.claims, finished.claimed_by) == (2, 2, None)
    assert Path(f"{flag}.fence.2").read_text() == "True"

    stalled.send(signal.SIGCONT)
    answer = Path(f"{flag}.fence.1")
    wait_until(
        lambda: answer.exists() and answer.read_text(),
        PICKUP_S,
        message=fleet.logs,
    )
    assert answer.read_text() == "False", "a stale claim's fenced write landed"
    # The resumed attempt then settles (or drops) its run; a drain waits
    # for that before the process exits.
    stalled.send(signal.SIGTERM)
    assert stalled.wait_exit(timeout=15) == 0, stalled.tail()

    after = job_row(job_id)
    assert (after.state, after.claims, after.claimed_by) == ("done", 2, None)
    assert after.updated_at == finished.updated_at, "the stale settle landed"
    assert after.result == finished.result
    assert after.progress == finished.progress
    assert after.progress is None or after.progress["note"].endswith("2"), (
        after.progress
    )
    effects = effects_of(job_id)
    assert [(e.kind, e.claims) for e in effects] == [
        ("start", 1),
        ("start", 2),
        ("after", 2),
    ]
    assert f":{stalled.pid}:" in effects[0].worker
    assert f":{rescuer.pid}:" in effects[1].worker
    assert lease_overlaps(EffectRow.of(e) for e in effects) == []
    stalled_log = stalled.output()
    assert "jobs.lease.lost" in stalled_log or "jobs.settle.unowned" in stalled_log


def test_crash_right_after_claim_commit_reruns_the_job_counted(fleet):
    job_id = effect.enqueue().id
    crashing = fleet.start(
        env={"ULTIMATE_JOBS_FAULTS": f"{AFTER_CLAIM_COMMIT}=exit"}, name="crashing"
    )
    assert crashing.wait_exit(timeout=PICKUP_S) == 137, crashing.tail()
    claimed = job_row(job_id)
    assert (claimed.state, claimed.attempt, claimed.claims) == ("running", 1, 1)
    assert effects_of(job_id) == []

    fleet.start(name="second")
    wait_until(_state_is(job_id, "done"), PICKUP_S, message=fleet.logs)
    row = job_row(job_id)
    assert (row.attempt, row.claims) == (2, 2)
    assert [(e.claims, e.attempt) for e in effects_of(job_id)] == [(2, 2)]


def test_supervisor_started_with_python_m_django_runs_jobs(fleet):
    """``python -m django runjobs --processes 2``: the children must work too.

    The supervisor re-runs its own ``sys.argv``; under ``-m`` that is the
    path of ``django/__main__.py``, which run as a script puts the
    ``django/`` package directory first on ``sys.path``.
    """
    jobs = [e.id for e in effect.enqueue_many([{}] * 4)]
    supervisor = fleet.start("--processes", "2", name="supervisor")

    def done_or_child_died():
        if "jobs.supervisor.child-died" in supervisor.output():
            return "a child died"
        return all(state_of(j) == "done" for j in jobs) and "done"

    outcome = wait_until(done_or_child_died, PICKUP_S, message=supervisor.tail)
    assert outcome == "done", supervisor.tail(25)
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=30) == 0, supervisor.tail()


def _two_children(supervisor):
    """The supervisor's two live children's pids, or None while not two."""
    children = supervisor.children()
    return children if len(children) == 2 else None


def test_supervisor_replaces_a_killed_child_and_stops_all_on_sigterm(fleet):
    supervisor = fleet.start(
        "--processes", "2", "--concurrency", "2", name="supervisor", manage_py=True
    )

    def two_children():
        return _two_children(supervisor)

    children = wait_until(two_children, PICKUP_S, message=fleet.logs)
    victim = children[0]
    os.kill(victim, signal.SIGKILL)

    def replaced():
        now = two_children()
        return now if now and victim not in now else None

    survivors = wait_until(replaced, PICKUP_S, message=fleet.logs)
    assert children[1] in survivors

    jobs = [e.id for e in effect.enqueue_many([{}] * 20)]
    wait_until(
        lambda: (
            Effect.objects.filter(job_id__in=jobs).count() >= 20
            and all(state_of(j) == "done" for j in jobs)
        ),
        PICKUP_S,
        message=fleet.logs,
    )
    pids = {int(e.worker.split(":")[1]) for e in Effect.objects.filter(job_id__in=jobs)}
    assert pids <= set(survivors), (pids, survivors)

    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=30) == 0, fleet.logs()
    assert not [p for p in survivors if psutil.pid_exists(p)], fleet.logs()


def test_children_drain_and_exit_when_their_supervisor_is_killed(fleet):
    """``kill -9`` of the supervisor: its children notice, finish the job they
    hold (drain) and exit, instead of running on unsupervised."""
    supervisor = fleet.start(
        "--processes", "2", "--concurrency", "2", name="supervisor", manage_py=True
    )

    def two_children():
        return _two_children(supervisor)

    children = wait_until(two_children, PICKUP_S, message=fleet.logs)
    held = slow.enqueue(seconds=2).id
    wait_until(lambda: state_of(held) == "running", PICKUP_S, message=fleet.logs)

    supervisor.kill()

    wait_until(
        lambda: not [p for p in children if psutil.pid_exists(p)],
        PICKUP_S,
        message=fleet.logs,
    )
    assert state_of(held) == "done"  # drained, not abandoned
    assert job_row(held).claims == 1
    assert supervisor.output().count("jobs.supervisor.orphaned") == 2, fleet.logs()
    later = effect.enqueue().id
    assert state_of(later) == "ready"  # nobody claims any more


def test_supervised_children_recycle_after_max_jobs(fleet):
    total, max_jobs = 30, 5
    jobs = [e.id for e in effect.enqueue_many([{}] * total)]
    # One slot and a claim batch of one: a child holds at most two jobs, so
    # it stops claiming soon after its fifth.
    held_max = 2
    fleet.start(
        "--processes",
        "2",
        "--concurrency",
        "1",
        "--max-jobs-per-process",
        str(max_jobs),
        env={"UJ_CLAIM_BATCH": "1"},
        name="supervisor",
        manage_py=True,
    )
    wait_until(lambda: all(state_of(j) == "done" for j in jobs), 60, message=fleet.logs)
    effects = list(Effect.objects.filter(job_id__in=jobs))
    assert Counter(e.job_id for e in effects) == Counter(jobs)  # each ran once
    per_worker = Counter(e.worker for e in effects)
    print(f"max-jobs: runs per child {sorted(per_worker.values(), reverse=True)}")
    assert max(per_worker.values()) <= max_jobs + held_max, per_worker
    assert len(per_worker) >= -(-total // (max_jobs + held_max)), per_worker
    assert "jobs.supervisor.recycled" in fleet.processes[0].output()


def test_supervised_burst_exits_zero_once_every_child_finished(fleet):
    """``--processes 2 --burst``: a child that exits 0 has finished its burst.

    It is not replaced (a restart was a "death", and five of them a crash
    loop, exit 1); the supervisor exits 0 once both children have.
    """
    jobs = [e.id for e in effect.enqueue_many([{}] * 20)]
    supervisor = fleet.start(
        "--processes", "2", "--concurrency", "2", "--burst", name="supervisor"
    )
    assert supervisor.wait_exit(timeout=60) == 0, supervisor.tail()

    assert [state_of(j) for j in jobs] == ["done"] * 20
    log = supervisor.output()
    assert "child-died" not in log and "crash-loop" not in log, supervisor.tail()
    assert log.count("jobs.supervisor.started-child") == 2, supervisor.tail()
    assert log.count("jobs.supervisor.child-finished") == 2, supervisor.tail()


def test_supervised_burst_whose_child_died_exits_one(fleet):
    """A burst child killed by its job (``tests.poison``) is reported: its
    death is logged, it is replaced, and the burst run exits 1."""
    bad = poison.enqueue().id
    supervisor = fleet.start("--processes", "2", "--burst", name="supervisor")
    assert supervisor.wait_exit(timeout=60) == 1, supervisor.tail()

    log = supervisor.output()
    assert "jobs.supervisor.child-died" in log, supervisor.tail()
    assert "code=137" in log, supervisor.tail()
    # Three attempts at most: the deaths stay under the crash-loop limit.
    assert "crash-loop" not in log, supervisor.tail()
    assert job_row(bad).claims >= 1


def test_burst_exits_zero_after_finishing_what_was_due(fleet):
    due = [effect.enqueue().id for _ in range(5)]
    later = effect.using(delay="1h").enqueue().id

    worker = fleet.start("--burst")
    assert worker.wait_exit(timeout=30) == 0, fleet.logs()

    assert [state_of(job_id) for job_id in due] == ["done"] * 5
    assert all(len(effects_of(job_id)) == 1 for job_id in due)
    assert state_of(later) == "delayed"
    assert effects_of(later) == []

    # Nothing due at all: a burst worker exits 0 at once and runs nothing.
    idle = fleet.start("--burst", name="idle-burst")
    assert idle.wait_exit(timeout=30) == 0, fleet.logs()
    assert state_of(later) == "delayed"
    assert effects_of(later) == []
