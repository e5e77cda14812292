"""``manage.py jobs``: exit 0 only when the action happened."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs.drivers.base import AckRequest, ClaimOptions
from tests.jobsapp.jobs import noop
from tests.support.workers import django_command

pytestmark = pytest.mark.postgres


def jobs(*args):
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def finish(driver, job_id):
    (claimed,) = driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert claimed.id == job_id
    assert driver.ack(AckRequest(job_id=claimed.id, identity=claimed.identity))


def test_show_prints_the_job_as_json(pg_driver):
    """show --json answers the row, its state and retry schedule."""
    enqueued = noop.enqueue(n=1)
    answer = json.loads(jobs("--json", "show", str(enqueued.id)))
    assert answer["id"] == str(enqueued.id)
    assert answer["state"] == "ready"
    assert answer["retry_delays_ms"] == [1000, 2000]


def test_an_id_that_is_not_a_uuid_is_refused_before_any_statement(pg_driver):
    """A malformed id fails with X_JOB_ID_INVALID, not a database error."""
    with pytest.raises(CommandError, match="X_JOB_ID_INVALID"):
        jobs("show", "not-a-uuid")


def test_an_unknown_id_exits_non_zero(pg_driver):
    """show and rm of an id nobody holds refuse with X_JOB_NOT_FOUND."""
    for verb in ("show", "rm"):
        with pytest.raises(CommandError, match="X_JOB_NOT_FOUND"):
            jobs(verb, "01939b2c-0000-7000-8000-000000000000")


def test_retry_requeues_a_finished_job_and_refuses_a_live_one(pg_driver):
    """retry moves a done job back to ready; a ready job is X_JOB_NOT_REQUEUEABLE."""
    enqueued = noop.enqueue(n=2)
    with pytest.raises(CommandError, match="X_JOB_NOT_REQUEUEABLE"):
        jobs("retry", str(enqueued.id))
    finish(pg_driver, enqueued.id)
    assert "ready" in jobs("retry", str(enqueued.id))
    assert pg_driver.get(enqueued.id).attempt == 0


def test_retry_from_a_step_the_job_has_not_is_refused_naming_its_steps(
    pg_driver, clock
):
    """``--from-step`` a name the run never recorded: a coded refusal, not a
    plain retry; the message lists the job's steps."""
    from django_ultimate_jobs.drivers.steps import StepFence, StepRecord

    enqueued = noop.enqueue(n=3)
    (claimed,) = pg_driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    fence = StepFence(claimed.id, claimed.identity)
    for name in ("fetch", "charge"):
        record = StepRecord(
            run_id=claimed.run_id, name=name, status="completed", started_at=clock.now()
        )
        pg_driver.steps.put(record, fence)
        clock.advance(seconds=1)
    assert pg_driver.ack(AckRequest(job_id=claimed.id, identity=claimed.identity))
    with pytest.raises(CommandError) as caught:
        jobs("retry", str(enqueued.id), "--from-step", "chrage")
    message = str(caught.value)
    assert message.startswith("X_STEP_NOT_FOUND: the job has no step named 'chrage'")
    assert "its steps: 'fetch', 'charge'" in message
    assert pg_driver.get(enqueued.id).state == "done"
    assert "ready" in jobs("retry", str(enqueued.id), "--from-step", "charge")
    assert set(pg_driver.steps.list(claimed.run_id)) == {"fetch"}


def test_cancel_promote_and_rm(pg_driver):
    """cancel a delayed job, promote another, remove a finished one."""
    delayed = noop.using(delay="1h").enqueue(n=3)
    waiting = noop.using(delay="1h").enqueue(n=4)
    assert "cancelled" in jobs("cancel", str(delayed.id))
    with pytest.raises(CommandError, match="X_JOB_NOT_CANCELLABLE"):
        jobs("cancel", str(delayed.id))
    assert "ready" in jobs("promote", str(waiting.id))
    assert jobs("rm", str(delayed.id)).startswith("removed")
    assert pg_driver.get(delayed.id) is None


def test_pause_resume_and_stats(pg_driver):
    """pause lists the paused queue, stats counts it, resume clears it."""
    noop.enqueue(n=5)
    assert "default" in jobs("pause", "default")
    stats = json.loads(jobs("--json", "stats"))
    assert stats["paused"][0]["name"] == "default"
    assert stats["totals"]["ready"] == 1
    assert jobs("resume", "default") == "paused queues: none\n"


def test_ls_pages_and_filters(pg_driver):
    """ls prints newest first, a next cursor on a full page, and filters by
    state; several states are comma-separated, as for count."""
    ids = sorted(str(noop.enqueue(n=n).id) for n in range(3))
    page = json.loads(jobs("--json", "ls", "--limit", "2"))
    assert [j["id"] for j in page["jobs"]] == ids[:0:-1]
    rest = jobs("ls", "--limit", "2", "--after", page["next"])
    assert ids[0] in rest and "next page" not in rest
    assert jobs("ls", "--state", "dead") == "no jobs\n"
    (_running,) = pg_driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    both = json.loads(jobs("--json", "ls", "--state", "ready, running"))
    assert sorted(j["id"] for j in both["jobs"]) == ids
    ready = json.loads(jobs("--json", "ls", "--state", "ready,dead"))
    assert sorted(j["id"] for j in ready["jobs"]) == sorted(
        set(ids) - {str(_running.id)}
    )
    with pytest.raises(CommandError, match="X_JOB_PAGE_INVALID"):
        jobs("ls", "--state", "dead,exploded")


def test_ls_refuses_a_page_past_the_bound(pg_driver):
    """A limit over 200 is X_JOB_PAGE_INVALID, before any statement."""
    with pytest.raises(CommandError, match="X_JOB_PAGE_INVALID"):
        jobs("ls", "--limit", "500")


def test_count_prints_one_number(pg_driver):
    """count prints how many jobs match; several states are comma-separated."""
    for n in range(3):
        noop.enqueue(n=n)
    (_running,) = pg_driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert jobs("count") == "3\n"
    assert jobs("count", "--queue", "default", "--state", "ready") == "2\n"
    assert json.loads(jobs("--json", "count", "--state", "ready, running")) == 3
    assert jobs("count", "--name", "tests.noop", "--state", "dead") == "0\n"
    with pytest.raises(CommandError, match="X_JOB_PAGE_INVALID"):
        jobs("count", "--state", "dead,exploded")


def test_json_is_accepted_after_every_verb(pg_driver):
    """``jobs <verb> ... --json`` works as ``jobs --json <verb> ...`` does."""
    from django_ultimate_jobs.management.commands.jobs import Command

    enqueued = str(noop.using(delay="1h").enqueue(n=6).id)
    assert json.loads(jobs("show", enqueued, "--json"))["id"] == enqueued
    assert json.loads(jobs("ls", "--json", "--limit", "1"))["jobs"][0]["id"] == enqueued
    assert json.loads(jobs("stats", "--json"))["totals"]["delayed"] == 1
    assert json.loads(jobs("--json", "stats"))["totals"]["delayed"] == 1
    assert "totals" not in jobs("stats")  # human output stays the default
    subparsers = Command().create_parser("manage.py", "jobs")._subparsers
    (verbs,) = [a for a in subparsers._group_actions if a.choices]
    without = [
        verb
        for verb, parser in verbs.choices.items()
        if not any("--json" in action.option_strings for action in parser._actions)
    ]
    assert not without, f"verbs that refuse a trailing --json: {without}"


def test_a_json_refusal_is_a_json_object_on_stderr(pg_driver):
    """With ``--json`` a refusal is ``{"error": {code, cause, fix, meta}}`` on
    stderr (scripts parse it like the answers); the command still fails."""
    err = StringIO()
    with pytest.raises(CommandError, match="X_JOB_ID_INVALID"):
        call_command(
            "jobs", "--json", "show", "not-a-uuid", stdout=StringIO(), stderr=err
        )
    error = json.loads(err.getvalue())["error"]
    assert error["code"] == "X_JOB_ID_INVALID"
    assert error["cause"] == "that is not a job id (a UUID)"
    assert error["fix"].startswith("pass the job's UUID")
    assert error["meta"] == {"given": "..."}


def test_a_json_refusal_from_a_shell_prints_only_the_json_and_exits_1():
    """``manage.py jobs --json ...`` from a shell: stderr ends with the JSON
    object (after any system-check warnings), with no ``CommandError:`` line
    after it, and the exit status is 1."""
    done = django_command("jobs", "--json", "count", "--state", "")
    assert done.returncode == 1, done.stderr
    assert "CommandError" not in done.stderr
    error = json.loads(done.stderr.splitlines()[-1])["error"]
    assert (error["code"], error["meta"]) == ("X_JOB_PAGE_INVALID", {"filter": "state"})
    assert done.stdout == ""


def test_count_of_an_empty_state_list_is_refused(pg_driver):
    """``jobs count --state ""`` counted every job; now it is refused."""
    noop.enqueue(n=1)
    with pytest.raises(
        CommandError, match="X_JOB_PAGE_INVALID: the state filter is an empty list"
    ):
        jobs("count", "--state", "")


def test_pausing_a_bad_queue_name_gives_a_queue_name_fix(pg_driver):
    """Not the job-input advice: how to write a queue name."""
    with pytest.raises(CommandError) as caught:
        jobs("pause", " billing")
    assert str(caught.value) == (
        "X_JOB_INPUT_INVALID: queue must be written without surrounding spaces "
        "(fix: pass a queue name: a non-empty string of at most 200 printable "
        "characters, without surrounding spaces)"
    )


def test_show_of_a_job_that_succeeded_after_a_failure_calls_its_error_earlier(
    pg_driver,
):
    """The error a retried attempt left is history once the job is done."""
    from django_ultimate_jobs.models import Job

    enqueued = noop.enqueue(n=1)
    finish(pg_driver, enqueued.id)
    Job.objects.filter(id=enqueued.id).update(last_error="X_BOOM: the first try")

    shown = jobs("show", str(enqueued.id))

    assert "an earlier error: X_BOOM: the first try" in shown
    assert "last error" not in shown


def test_tasks_says_never_for_a_task_that_never_ran(pg_driver):
    """No ``last=None``: a task with no occurrence yet has run never."""
    listed = jobs("tasks")
    assert "last=None" not in listed
    assert "last=never" in listed
