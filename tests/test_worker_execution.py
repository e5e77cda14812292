"""The executor's outcomes, through the real worker path (``run_jobs()``)."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections

from django_ultimate_jobs import (
    RateLimited,
    Retry,
    RetryAfter,
    Terminal,
    job_finished,
    job_started,
    register_error_retry,
)
from django_ultimate_jobs.drivers.base import ClaimOptions
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.executor import run_attempt
from django_ultimate_jobs.worker.runner import Worker
from tests.support.backends import terminate_backends
from tests.support.waiting import wait_until
from tests.support.workers import database_url

pytestmark = pytest.mark.postgres


@pytest.fixture
def declared(declare_jobs):
    return declare_jobs("exec", "t.exec")


def drain(driver):
    return run_jobs(queues=["exec"], driver=driver)


def test_a_returning_body_completes_and_stores_its_result(pg_driver, declared):
    """A body that returns settles done, its JSON result stored on the row."""

    @declared()
    def ok(ctx, *, n: int):
        return {"double": n * 2}

    enqueued = ok.enqueue(n=21)
    (execution,) = drain(pg_driver)
    assert execution.outcome == "completed"
    assert execution.landed is True
    row = pg_driver.get(enqueued.id)
    assert row.state == "done"
    assert row.attempt == 1
    assert row.claimed_by is None and row.visible_at is None


def test_a_failure_with_attempts_left_is_retried_later(pg_driver, declared, clock):
    """A raise with attempts left goes back to ready, due after the backoff."""

    @declared(retry=Retry(attempts=3, delay="10s", jitter="none"))
    def flaky(ctx):
        raise ValueError("upstream said no")

    enqueued = flaky.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "retried"
    row = pg_driver.get(enqueued.id)
    assert row.state == "ready"
    assert row.run_at == clock.now() + timedelta(seconds=10)
    assert row.last_error == "ValueError: upstream said no"
    assert "upstream said no" in row.last_error_stack
    assert drain(pg_driver) == []  # not due yet
    clock.advance(seconds=10)
    (second,) = drain(pg_driver)
    assert second.claimed.attempt == 2
    assert pg_driver.get(enqueued.id).run_at == clock.now() + timedelta(seconds=20)


def test_exhausted_attempts_dead_letter_the_job(pg_driver, declared, clock):
    """The last failed attempt parks the job as dead, once."""
    settled = []

    @declared(
        retry=Retry(attempts=2, delay="1s", jitter="none"),
        on_settled=settled.append,
    )
    def doomed(ctx):
        raise ValueError("always")

    enqueued = doomed.enqueue()
    drain(pg_driver)
    clock.advance(seconds=1)
    (last,) = drain(pg_driver)
    assert last.outcome == "dead-lettered"
    assert last.stop == "attempts-exhausted"
    assert pg_driver.get(enqueued.id).state == "dead"
    assert [s.outcome for s in settled] == ["dead-lettered"]
    assert settled[0].attempt == 2
    clock.advance(hours=2)
    assert drain(pg_driver) == []


def test_dead_letter_false_settles_failed(pg_driver, declared):
    """With dead_letter=False an exhausted job ends failed, not dead."""

    @declared(retry=Retry(attempts=1, dead_letter=False))
    def dropped(ctx):
        raise ValueError("no")

    enqueued = dropped.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "dropped"
    assert pg_driver.get(enqueued.id).state == "failed"


def test_terminal_stops_now_without_spending_the_remaining_attempts(
    pg_driver, declared
):
    """Terminal(...) dead-letters on the first attempt and says why."""

    @declared(retry=Retry(attempts=5))
    def refuses(ctx):
        raise Terminal("card declined", code="X_CARD_DECLINED")

    register_error_retry("X_CARD_DECLINED", "terminal")
    enqueued = refuses.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "dead-lettered"
    row = pg_driver.get(enqueued.id)
    assert row.attempt == 1
    assert row.last_error.startswith("X_CARD_DECLINED: card declined")
    assert "classified terminal" in row.last_error


def test_an_app_code_registered_terminal_dead_letters_at_once(pg_driver, declared):
    """register_error_retry() classifies an app's own exception by its code."""

    class PaymentRefused(Exception):
        code = "X_PAYMENT_REFUSED"

    register_error_retry("X_PAYMENT_REFUSED", "terminal")

    @declared(retry=Retry(attempts=4))
    def pay(ctx):
        raise PaymentRefused("insufficient funds")

    enqueued = pay.enqueue()
    drain(pg_driver)
    assert pg_driver.get(enqueued.id).state == "dead"


def test_retry_after_waits_the_stated_delay(pg_driver, declared, clock):
    """RetryAfter(s) reschedules after s seconds and spends the attempt."""

    @declared(retry=Retry(attempts=3, delay="1s", jitter="none"))
    def later(ctx):
        raise RetryAfter(120)

    enqueued = later.enqueue()
    drain(pg_driver)
    row = pg_driver.get(enqueued.id)
    assert row.state == "ready"
    assert row.attempt == 1
    assert row.run_at == clock.now() + timedelta(seconds=120)


def test_rate_limited_reschedules_without_spending_an_attempt(
    pg_driver, declared, clock
):
    """RateLimited is "not yet": the attempt is given back, the wait is a floor."""

    @declared(retry=Retry(attempts=1))
    def limited(ctx):
        raise RateLimited(30)

    enqueued = limited.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "retried"
    row = pg_driver.get(enqueued.id)
    assert row.state == "ready"
    assert row.attempt == 0
    assert row.run_at >= clock.now() + timedelta(seconds=30)


def test_a_timeout_cancels_the_token_then_fails_the_attempt(pg_driver, declared):
    """A body past its timeout sees its token set, then the attempt fails X_JOB_TIMEOUT."""
    seen = []

    @declared(timeout="200ms", retry=Retry(attempts=2, delay="1s"))
    def slow(ctx):
        cancelled = ctx.cancellation.wait(5)
        seen.append((cancelled, ctx.cancellation.reason.code))

    enqueued = slow.enqueue()
    (execution,) = drain(pg_driver)
    assert seen == [(True, "X_JOB_TIMEOUT")]
    assert execution.outcome == "retried"
    assert pg_driver.get(enqueued.id).last_error.startswith("X_JOB_TIMEOUT")


def test_async_handlers_run(pg_driver, declared):
    """An async def handler runs to completion on the worker."""

    @declared()
    async def coroutine(ctx, *, n: int):
        await asyncio.sleep(0)
        return n + 1

    enqueued = coroutine.enqueue(n=1)
    (execution,) = drain(pg_driver)
    assert execution.outcome == "completed"
    assert execution.result == 2
    assert pg_driver.get(enqueued.id).state == "done"


def test_exit_and_interrupt_in_a_slot_fail_the_attempt_and_the_slot_goes_on(
    committed_pg_driver, declare_jobs
):
    """A body's SystemExit or KeyboardInterrupt (sync or async) fails its attempt.

    In a slot thread neither can be the process being stopped (signals reach
    the main thread only): the row records it, and the one slot, with its
    event loop, runs the next job. The burst worker ends by itself.
    """
    declared = declare_jobs("exits", "t.exits", retry=Retry(attempts=1))

    @declared(priority=4)
    def exits(ctx):
        raise SystemExit(3)

    @declared(priority=3)
    async def async_exits(ctx):
        await asyncio.sleep(0)
        raise SystemExit("async bye")

    @declared(priority=2)
    def interrupted(ctx):
        raise KeyboardInterrupt

    @declared(priority=1)
    async def async_interrupted(ctx):
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    @declared()
    async def after(ctx):
        await asyncio.sleep(0)
        return "ran"

    failing = {
        exits.enqueue().id: "SystemExit: 3",
        async_exits.enqueue().id: "SystemExit: async bye",
        interrupted.enqueue().id: "KeyboardInterrupt",
        async_interrupted.enqueue().id: "KeyboardInterrupt",
    }
    last = after.enqueue()
    worker = Worker(
        WorkerConfig.from_settings(queues=("exits",), concurrency=1, burst=True),
        driver=committed_pg_driver,
    )

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_until(
            lambda: not runner.is_alive(), 30, message="the burst worker never ended"
        )
    finally:
        worker.request_stop(deadline_s=2)
        runner.join(5)
    for job_id, text in failing.items():
        row = committed_pg_driver.get(job_id)
        assert (row.state, row.attempt, row.last_error) == ("dead", 1, text)
        assert text in row.last_error_stack
    assert committed_pg_driver.get(last.id).result == "ran"


def test_keyboard_interrupt_in_the_calling_thread_stops_run_jobs(pg_driver, declared):
    """In the main thread a KeyboardInterrupt may be Ctrl-C: it is not swallowed."""

    @declared()
    def interrupted(ctx):
        raise KeyboardInterrupt

    @declared(retry=Retry(attempts=1))
    def exits(ctx):
        raise SystemExit(2)

    exited = exits.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "dead-lettered"
    assert pg_driver.get(exited.id).last_error == "SystemExit: 2"
    interrupted.enqueue()
    with pytest.raises(KeyboardInterrupt):
        drain(pg_driver)


def test_progress_is_stored_before_the_settle(pg_driver, declared):
    """The last progress report lands on the row before the job settles."""

    @declared()
    def reporting(ctx):
        for done in range(1, 4):
            ctx.progress(done, 3, note="x" * 200)

    enqueued = reporting.enqueue()
    drain(pg_driver)
    progress = pg_driver.get(enqueued.id).progress
    assert progress["done"] == 3 and progress["total"] == 3
    assert progress["note"] == "x" * 200


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((float("nan"), 3), "done=...) must be finite, not nan"),
        ((1, float("inf")), "total=...) must be finite, not inf"),
        ((True, 3), "done=...) must be an int or a float, not bool"),
        ((1, 3, "x" * 201), "holds 201 characters; at most 200"),
        ((1, 3, 7), "note=...) must be a string, not int"),
    ],
)
def test_bad_progress_is_refused_not_clamped(pg_driver, declared, args, says):
    """NaN, infinity and an overlong note fail the body with a code; none is stored."""

    @declared(retry=Retry(attempts=3))
    def reporting(ctx):
        ctx.progress(*args)

    enqueued = reporting.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "dead-lettered"
    row = pg_driver.get(enqueued.id)
    assert row.progress is None and row.attempt == 1
    assert row.last_error.startswith("X_JOB_PROGRESS_INVALID: ctx.progress(")
    assert says in row.last_error


def test_a_progress_note_postgres_cannot_store_is_refused_before_any_write(
    pg_driver, declared
):
    """A NUL or a lone surrogate in a note: X_JOB_PROGRESS_INVALID, nothing written.

    Refused in Python, so a transaction the body holds open stays usable.
    """
    from django.db import transaction

    from django_ultimate_jobs.errors import JobProgressInvalid

    @declared()
    def reporting(ctx):
        with transaction.atomic():
            for note in ("half\x00way", "half \ud800"):
                with pytest.raises(JobProgressInvalid):
                    ctx.progress(1, 2, note=note)
            ctx.flush_progress()
            # Read in the same transaction: it must still be usable.
            return pg_driver.get(ctx.job_id).progress

    enqueued = reporting.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.outcome == "completed"
    assert execution.result is None
    assert pg_driver.get(enqueued.id).state == "done"


def test_an_error_message_postgres_cannot_store_still_settles_the_job(
    pg_driver, declared
):
    """``ValueError("a\\x00b")`` dead-letters with U+FFFD in its text.

    Sent as is, the NUL (or a lone surrogate) failed the settle: the row
    stayed running until its lease lapsed, and the job ran again.
    """

    @declared(retry=Retry(attempts=1))
    def boom(ctx):
        raise ValueError("card\x00number \ud800")

    enqueued = boom.enqueue()
    (execution,) = drain(pg_driver)
    assert execution.landed is True
    row = pg_driver.get(enqueued.id)
    assert row.state == "dead"
    assert row.last_error == "ValueError: card\ufffdnumber \ufffd"
    assert "card\ufffdnumber" in row.last_error_stack
    assert row.history[-1]["error"] == row.last_error


def test_unknown_job_names_are_parked_without_spending_an_attempt(
    pg_driver, declared, clock
):
    """A row no worker knows (deploy skew) is parked for 30 s, attempt unspent."""

    @declared()
    def vanishing(ctx):
        return None

    enqueued = vanishing.enqueue()
    unregister(vanishing.name)
    (execution,) = drain(pg_driver)
    assert execution.outcome == "suspended"
    row = pg_driver.get(enqueued.id)
    assert row.state == "suspended"
    assert row.attempt == 0
    assert row.run_at == clock.now() + timedelta(seconds=30)
    assert "X_JOB_UNKNOWN" in row.last_error


def test_an_unknown_job_says_which_jobs_modules_the_worker_imported(
    pg_driver, declared
):
    """The parked row's error lists the ``<app>.jobs`` modules autodiscovery
    imported and says only installed apps' are: a newcomer whose app is not
    in INSTALLED_APPS read only "no job registered" and could not tell why."""

    @declared()
    def elsewhere(ctx):
        return None

    enqueued = elsewhere.enqueue()
    unregister(elsewhere.name)
    drain(pg_driver)
    error = pg_driver.get(enqueued.id).last_error
    assert error.startswith(
        f"X_JOB_UNKNOWN: no job registered as {elsewhere.name!r} in this worker; "
        "the jobs modules it imported are tests.jobsapp.jobs "
    ), error
    assert "(only the jobs.py of an app in INSTALLED_APPS is imported)" in error
    assert "app listed in INSTALLED_APPS" in error  # the fix
    # tests.tasksapp has no jobs module: it is not listed.
    assert "tasksapp" not in error


def test_on_settled_runs_once_after_a_landed_completion(pg_driver, declared):
    """on_settled sees the completed outcome and the returned value itself."""
    calls = []

    @declared(on_settled=calls.append)
    def done(ctx):
        return {"ok": True}

    done.enqueue()
    drain(pg_driver)
    assert [(c.outcome, c.result) for c in calls] == [("completed", {"ok": True})]


def test_a_raising_on_settled_is_tried_three_times_and_never_fails_the_job(
    pg_driver, declared, caplog
):
    """on_settled failures are logged X_JOB_ON_SETTLED_FAILED; the row stays done."""
    tries = []

    def hook(settled):
        tries.append(settled)
        raise RuntimeError("hook broke")

    @declared(on_settled=hook)
    def done(ctx):
        return None

    enqueued = done.enqueue()
    drain(pg_driver)
    assert len(tries) == 3
    assert pg_driver.get(enqueued.id).state == "done"
    assert any(r.msg == "jobs.on-settled.failed" for r in caplog.records)


def test_an_on_settled_that_lost_its_connection_reconnects_on_its_next_try(
    committed_pg_driver, declared
):
    """The hook's backend killed mid-try: the next try runs on a new connection."""
    tries = []

    def hook(settled):
        if not tries:
            tries.append("killed")
            with connection.cursor() as cursor:
                cursor.execute("select pg_backend_pid()")
                (pid,) = cursor.fetchone()
            killed = terminate_backends(
                database_url(connection.settings_dict),
                lambda backend: backend.pid == pid,
                database=connection.settings_dict["NAME"],
            )
            assert killed
        Job.objects.filter(id=settled.job_id).count()
        tries.append("ran")

    @declared(on_settled=hook)
    def done(ctx):
        return None

    enqueued = done.enqueue()
    drain(committed_pg_driver)
    assert tries == ["killed", "ran"]
    assert committed_pg_driver.get(enqueued.id).state == "done"


def test_signals_are_sent_for_start_and_finish(pg_driver, declared):
    """job_started and job_finished fire once per attempt with the outcome."""
    events = []

    def on_started(sender, job, claimed, **kwargs):
        events.append(("started", job.name))

    def on_finished(sender, job, claimed, outcome, **kwargs):
        events.append(("finished", outcome))

    @declared()
    def signalled(ctx):
        return None

    job_started.connect(on_started)
    job_finished.connect(on_finished)
    try:
        signalled.enqueue()
        drain(pg_driver)
    finally:
        job_started.disconnect(on_started)
        job_finished.disconnect(on_finished)
    assert events == [("started", signalled.name), ("finished", "completed")]


def test_a_schema_that_no_longer_accepts_the_stored_input_fails_terminally(
    pg_driver, declared
):
    """The input is re-validated at claim; a refusal dead-letters at once."""
    accept = {"value": True}

    def schema(given):
        if not accept["value"]:
            raise ValueError("no longer valid")

    @declared(input_schema=schema, retry=Retry(attempts=5))
    def strict(ctx, *, n: int):
        return n

    enqueued = strict.enqueue(n=1)
    accept["value"] = False
    (execution,) = drain(pg_driver)
    assert execution.outcome == "dead-lettered"
    assert pg_driver.get(enqueued.id).last_error.startswith("X_JOB_INPUT_INVALID")


def test_a_lost_lease_cancels_the_running_body_and_writes_nothing(
    pg_driver, declared, clock
):
    """When a heartbeat no longer lands, the token is set and no settle is written."""
    started = threading.Event()
    release = threading.Event()
    observed = []

    @declared()
    def held(ctx):
        started.set()
        release.wait(5)
        observed.append(
            ctx.cancellation.reason.code if ctx.cancellation.reason else None
        )

    enqueued = held.enqueue()
    worker = Worker(
        WorkerConfig.from_settings(queues=("exec",), concurrency=1), driver=pg_driver
    )
    (attempt,), _ = worker.claims.claim(1)
    results = []
    body = threading.Thread(
        target=lambda: results.append(run_attempt(attempt, pg_driver))
    )
    body.start()
    assert started.wait(5)
    # An operator cancel takes the row: the next heartbeat does not land.
    pg_driver.cancel(enqueued.id, reason="operator")
    landed = pg_driver.heartbeat_many(
        [(attempt.claimed.id, attempt.claimed.identity)], visibility_ms=30_000
    )
    assert landed == set()
    worker.keeper.renew_leases()  # the keeper's renewal finds it lost too
    release.set()
    body.join(5)
    (execution,) = results
    assert observed == ["X_JOB_LEASE_LOST"]
    assert execution.outcome == "lost"
    assert execution.ack is None and execution.nack is None
    assert pg_driver.get(enqueued.id).state == "cancelled"


def test_a_settle_that_does_not_land_is_logged_not_raised(pg_driver, declared, caplog):
    """An ack fenced out by a re-claim is reported jobs.settle.unowned."""

    @declared()
    def ok(ctx):
        return None

    enqueued = ok.enqueue()
    worker = Worker(WorkerConfig.from_settings(queues=("exec",)), driver=pg_driver)
    (attempt,), _ = worker.claims.claim(1)
    pg_driver.cancel(enqueued.id)
    execution = run_attempt(attempt, pg_driver)
    worker.settler.settle([execution])
    assert execution.landed is False
    assert any(r.msg == "jobs.settle.unowned" for r in caplog.records)
    assert pg_driver.get(enqueued.id).state == "cancelled"


def test_jobs_error_codes_survive_in_last_error(pg_driver, declared):
    """A coded error's code, cause and fix are what the row records."""

    @declared(retry=Retry(attempts=1))
    def coded(ctx):
        raise JobsError(
            "the thing broke", code="X_THING_BROKE", fix="restart the thing"
        )

    enqueued = coded.enqueue()
    drain(pg_driver)
    assert pg_driver.get(enqueued.id).last_error == (
        "X_THING_BROKE: the thing broke (fix: restart the thing)"
    )


def test_claim_options_refuse_empty_queues(pg_driver):
    """A claim without queues is refused before any statement."""
    with pytest.raises(JobsError) as caught:
        pg_driver.claim(
            ClaimOptions(queues=[], limit=1, worker_id="w", visibility_ms=1000)
        )
    assert caught.value.code == "X_JOB_CLAIM_QUEUES_EMPTY"
