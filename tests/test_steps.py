"""Durable steps and waits, through the real worker path, on both drivers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_ultimate_jobs import Retry, publish_event
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.errors import JobInputInvalid
from django_ultimate_jobs.testing import run_jobs
from tests.support.values import four_byte_text, nested

# The Postgres runs need the test database; the memory runs just ignore it.
pytestmark = pytest.mark.django_db


@pytest.fixture(params=["postgres", "memory"])
def driver(request, clock):
    """Each test runs on the Postgres driver and on the memory driver."""
    if request.param == "postgres":
        installed = PostgresDriver(clock=clock)
    else:
        installed = MemoryDriver(clock=clock)
    previous = set_driver(installed)
    yield installed
    set_driver(previous)


@pytest.fixture
def declared(declare_jobs):
    return declare_jobs(
        "steps", "t.steps", retry=Retry(attempts=5, delay="1s", jitter="none")
    )


def drain(driver):
    return run_jobs(queues=["steps"], driver=driver)


NESTED_101 = nested(101)


def test_completed_steps_replay_from_storage(driver, declared, clock):
    """A job failing at step 4 twice runs steps 1-3 once each."""
    calls: list[str] = []
    failures = {"left": 2}

    def step(label):
        calls.append(label)
        if label == "four" and failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("step four failed")
        return {"label": label}

    @declared()
    def five(ctx):
        return [
            ctx.step.run(label, step, label)
            for label in ("one", "two", "three", "four", "five")
        ]

    enqueued = five.enqueue()
    for _ in range(3):
        drain(driver)
        clock.advance(seconds=10)
    assert calls.count("one") == calls.count("two") == calls.count("three") == 1
    assert calls.count("four") == 3 and calls.count("five") == 1
    row = driver.get(enqueued.id)
    assert row.state == "done"
    assert row.result == [{"label": x} for x in ("one", "two", "three", "four", "five")]


def test_a_step_name_used_twice_dead_letters_the_job(driver, declared):
    """X_STEP_DUPLICATE is terminal: a defect replays identically."""

    @declared()
    def twice(ctx):
        ctx.step.run("same", lambda: 1)
        ctx.step.run("same", lambda: 2)

    enqueued = twice.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "dead-lettered"
    assert driver.get(enqueued.id).last_error.startswith("X_STEP_DUPLICATE")


def test_an_output_json_cannot_hold_is_refused(driver, declared):
    """X_STEP_OUTPUT_UNSERIALIZABLE is terminal and nothing is recorded."""

    @declared()
    def odd(ctx):
        ctx.step.run("set", lambda: {1, 2})

    enqueued = odd.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "dead-lettered"
    assert driver.get(enqueued.id).last_error.startswith("X_STEP_OUTPUT_UNSERIALIZABLE")
    assert driver.steps.list(enqueued.id)["set"].status == "failed"


@pytest.mark.parametrize(
    "output",
    ["card\x00ok", {"note": "lone \ud800"}, {"deep": NESTED_101}],
    ids=["nul", "lone-surrogate", "too-deep"],
)
def test_an_output_jsonb_cannot_store_fails_terminally_after_one_run(
    driver, declared, output
):
    """A NUL (jsonb refuses it), a lone surrogate or 101 levels: checked before
    the write, X_STEP_OUTPUT_UNSERIALIZABLE, the side effect ran once.

    Unchecked, the insert failed with a raw database error, which was
    retried: the step's side effect ran again on every attempt.
    """
    calls = []

    def charge():
        calls.append(1)
        return output

    @declared()
    def pay(ctx):
        ctx.step.run("charge", charge)

    enqueued = pay.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "dead-lettered"
    assert drain(driver) == []
    assert len(calls) == 1
    row = driver.get(enqueued.id)
    assert row.last_error.startswith("X_STEP_OUTPUT_UNSERIALIZABLE: step 'charge'")
    assert driver.steps.list(enqueued.id)["charge"].status == "failed"


def test_a_failed_step_records_an_error_message_postgres_cannot_store(driver, declared):
    """The message is the app's text: NUL and lone surrogates become U+FFFD."""

    def boom():
        raise ValueError("bad\x00byte \ud800")

    @declared(retry=Retry(attempts=1))
    def pay(ctx):
        ctx.step.run("charge", boom)

    enqueued = pay.enqueue()
    drain(driver)
    step = driver.steps.list(enqueued.id)["charge"]
    assert (step.status, step.error) == ("failed", "ValueError: bad\ufffdbyte \ufffd")


BAD_STEP_NAMES = ["", "a\x00b", "a\ud800", four_byte_text(129)]


@pytest.mark.parametrize(
    "name", BAD_STEP_NAMES, ids=["empty", "nul", "lone-surrogate", "516-bytes"]
)
def test_a_step_name_postgres_cannot_index_fails_terminally(driver, declared, name):
    """X_STEP_NAME_INVALID before anything runs or is written (at most 512 bytes)."""
    calls = []

    @declared()
    def named(ctx):
        ctx.step.run(name, calls.append, 1)

    enqueued = named.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "dead-lettered"
    assert calls == []
    assert driver.get(enqueued.id).last_error.startswith("X_STEP_NAME_INVALID")
    assert driver.steps.list(enqueued.id) == {}


@pytest.mark.parametrize(
    ("event", "key"),
    [("a\x00b", None), ("a\ud800", None), ("e" * 201, None), ("e", "k\x00")],
    ids=["nul-name", "surrogate-name", "long-name", "nul-key"],
)
def test_a_wait_on_an_event_publish_would_refuse_fails_terminally(
    driver, declared, event, key
):
    """The wait checks its event name and key as publish_event does."""

    @declared()
    def waits(ctx):
        ctx.step.wait_for_event("w", event, key=key)

    enqueued = waits.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "dead-lettered"
    assert driver.get(enqueued.id).last_error.startswith("X_JOB_INPUT_INVALID")
    assert driver.steps.list(enqueued.id) == {}


@pytest.mark.parametrize(
    ("name", "key", "payload"),
    [
        ("a\x00b", None, None),
        ("a\ud800", None, None),
        ("e" * 201, None, None),
        ("e", "k\x00", None),
        ("e", "k\ud800", None),
        ("e", four_byte_text(129), None),
        ("e", None, {"note": "a\x00b"}),
        ("e", None, nested(101)),
    ],
    ids=[
        "nul-name",
        "surrogate-name",
        "long-name",
        "nul-key",
        "surrogate-key",
        "516-byte-key",
        "nul-payload",
        "deep-payload",
    ],
)
def test_publish_refuses_what_postgres_cannot_store_with_a_code(
    driver, clock, name, key, payload
):
    """X_JOB_INPUT_INVALID before the insert, never a DataError or
    UnicodeEncodeError from the driver; nothing is published."""
    try:
        publish_event(name, payload, key=key)
    except JobInputInvalid:
        pass
    except Exception as error:
        pytest.fail(f"BUG: raised {type(error).__name__} ({error}), not a coded error")
    else:
        pytest.fail("the publish was accepted")
    clock.advance(days=8)  # past the default ttl: anything published expires
    assert driver.events.purge_expired() == 0


def test_an_event_ttl_past_100_years_is_refused_with_its_own_fix(driver):
    """``ttl="36501d"``: X_JOB_INPUT_INVALID whose fix names the bound (not the
    job-input advice), and nothing is published."""
    with pytest.raises(JobInputInvalid) as caught:
        publish_event("e", {"n": 1}, ttl="36501d")
    assert "at most 36500d" in caught.value.cause
    assert "36500d" in caught.value.fix


@pytest.mark.parametrize("duration", ["99999999d", 10**20, timedelta.max], ids=repr)
def test_a_sleep_past_100_years_fails_the_attempt_with_a_code(
    driver, declared, duration
):
    """``ctx.step.sleep("nap", "99999999d")`` fails with X_DURATION_INVALID before
    the step is stored, not with an OverflowError or a DataError."""

    @declared()
    def sleeper(ctx):
        ctx.step.sleep("nap", duration)

    enqueued = sleeper.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "retried"
    assert driver.get(enqueued.id).last_error.startswith(
        "X_DURATION_INVALID: sleep duration must be at most 36500d"
    )
    assert driver.steps.list(enqueued.id) == {}


@pytest.mark.parametrize(
    ("when", "says"),
    [
        (datetime(2030, 1, 1), "needs a timezone-aware datetime"),
        ("2030-01-01", "needs a timezone-aware datetime"),
        (datetime(9999, 1, 1, tzinfo=UTC), "is more than 36500d (100 years) away"),
    ],
    ids=["naive", "text", "year-9999"],
)
def test_sleep_until_refuses_what_is_no_wake_time_with_a_code(
    driver, declared, when, says
):
    """A naive datetime, a string or a wake-up centuries away fails the attempt
    with X_DURATION_INVALID before the step is stored (it was a bare
    ValueError, or a sleep nobody would live to see)."""

    @declared()
    def sleeper(ctx):
        ctx.step.sleep_until("nap", when)

    enqueued = sleeper.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "retried"
    error = driver.get(enqueued.id).last_error
    assert error.startswith("X_DURATION_INVALID: sleep_until('nap')"), error
    assert says in error
    assert driver.steps.list(enqueued.id) == {}


def test_a_sleep_suspends_without_spending_an_attempt(driver, declared, clock):
    """The job parks until the sleep is over, then resumes after the sleep."""
    after = []

    @declared()
    def napper(ctx):
        ctx.step.run("before", lambda: "ok")
        ctx.step.sleep("nap", "1h")
        after.append(ctx.attempt)
        return "woke"

    enqueued = napper.enqueue()
    (execution,) = drain(driver)
    assert execution.outcome == "suspended"
    row = driver.get(enqueued.id)
    assert row.state == "suspended"
    assert row.attempt == 0
    assert row.run_at == clock.now() + timedelta(hours=1)
    clock.advance(minutes=59)
    assert drain(driver) == []
    clock.advance(minutes=1)
    (resumed,) = drain(driver)
    assert resumed.outcome == "completed" and resumed.result == "woke"
    assert after == [1]
    assert sorted(driver.steps.list(enqueued.id)) == ["before", "nap"]


def test_a_wait_gets_an_event_published_after_it_parked(driver, declared, clock):
    """The publish wakes the parked run at once; the payload is returned."""

    @declared()
    def approval(ctx, *, user_id: str):
        return ctx.step.wait_for_event("approval", "user.approved", key=user_id)

    enqueued = approval.enqueue(user_id="42")
    (parked,) = drain(driver)
    assert parked.outcome == "suspended"
    publish_event("user.approved", {"by": "someone else"}, key="41")
    assert drain(driver) == []  # another key: no wake
    publish_event("user.approved", {"by": "ada"}, key="42")
    (resumed,) = drain(driver)
    assert resumed.result == {"by": "ada"}
    assert driver.get(enqueued.id).state == "done"


def test_a_wait_times_out_to_none_or_raises_when_required(driver, declared, clock):
    """After the timeout a wait returns None; required=True fails X_JOB_TIMEOUT."""

    @declared()
    def optional(ctx):
        return {"got": ctx.step.wait_for_event("w", "never", timeout="10m")}

    @declared(retry=Retry(attempts=1))
    def required(ctx):
        return ctx.step.wait_for_event("w", "never", timeout="10m", required=True)

    first = optional.enqueue()
    second = required.enqueue()
    drain(driver)
    clock.advance(minutes=11)
    drain(driver)
    assert driver.get(first.id).result == {"got": None}
    second_row = driver.get(second.id)
    assert second_row.state == "dead"
    assert second_row.last_error.startswith("X_JOB_TIMEOUT")


def test_a_refused_event_fails_the_wait_and_hides_no_later_one(driver, declared, clock):
    """A schema refusal is X_JOB_EVENT_INVALID; a retry takes the next event."""

    def positive(payload):
        if not isinstance(payload, dict) or payload.get("amount", 0) <= 0:
            raise ValueError("amount must be positive")

    @declared(retry=Retry(attempts=1))
    def pay(ctx):
        return ctx.step.wait_for_event("paid", "payment", schema=positive)

    enqueued = pay.enqueue()
    drain(driver)
    publish_event("payment", {"amount": -5})
    clock.advance(milliseconds=5)
    publish_event("payment", {"amount": 7})
    (failed,) = drain(driver)
    assert failed.outcome == "dead-lettered"
    assert driver.get(enqueued.id).last_error.startswith("X_JOB_EVENT_INVALID")
    assert "-5" not in driver.get(enqueued.id).last_error
    driver.requeue(enqueued.id)
    (retried,) = drain(driver)
    assert retried.result == {"amount": 7}


def test_a_step_write_after_losing_the_job_is_refused(driver, declared):
    """A fenced step write of a cancelled attempt raises X_JOB_LEASE_LOST."""
    from django_ultimate_jobs.worker.config import WorkerConfig
    from django_ultimate_jobs.worker.executor import run_attempt
    from django_ultimate_jobs.worker.runner import Worker

    seen = []

    @declared()
    def cancelled(ctx):
        driver.cancel(ctx.job_id)  # an operator, mid-run
        try:
            ctx.step.run("after-cancel", lambda: 1)
        except Exception as error:
            seen.append(error.code)
            raise

    cancelled.enqueue()
    worker = Worker(WorkerConfig.from_settings(queues=("steps",)), driver=driver)
    (attempt,), _ = worker.claims.claim(1)
    attempt.start()
    run_attempt(attempt, driver)
    assert seen == ["X_JOB_LEASE_LOST"]
    assert "after-cancel" not in driver.steps.list(attempt.claimed.run_id)


def test_retry_from_a_step_reruns_it_and_the_later_ones(driver, declared, clock):
    """requeue(from_step=) drops that step and later ones; earlier ones replay."""
    calls: list[str] = []

    @declared()
    def three(ctx):
        for label in ("a", "b", "c"):
            clock.advance(milliseconds=2)
            ctx.step.run(label, calls.append, label)

    enqueued = three.enqueue()
    drain(driver)
    driver.requeue(enqueued.id, from_step="b")
    drain(driver)
    assert calls == ["a", "b", "c", "b", "c"]


def test_jobs_show_lists_the_steps_of_a_run(driver, declared, clock):
    """The operator's show answers each step with its status and timing."""
    from django_ultimate_jobs import operator

    @declared()
    def shown(ctx):
        ctx.step.run("first", lambda: 1)
        ctx.step.sleep("rest", "1h")

    enqueued = shown.enqueue()
    drain(driver)
    steps = operator.show(enqueued.id)["steps"]
    assert [(s["name"], s["status"]) for s in steps] == [
        ("first", "completed"),
        ("rest", "sleeping"),
    ]


def test_step_writes_after_cancellation_are_refused_with_x_aborted(driver, declared):
    """Once the attempt's token is set (its timeout here), a step is refused."""
    seen = []

    @declared(timeout="100ms")
    def late(ctx):
        ctx.cancellation.wait(5)
        try:
            ctx.step.run("too-late", lambda: 1)
        except Exception as error:
            seen.append(error.code)
            raise

    enqueued = late.enqueue()
    (execution,) = drain(driver)
    assert seen == ["X_ABORTED"]
    assert execution.outcome == "retried"
    assert driver.get(enqueued.id).last_error.startswith("X_JOB_TIMEOUT")
    assert "too-late" not in driver.steps.list(enqueued.id)


def test_a_step_past_its_step_timeout_fails_the_attempt(driver, declared):
    """step_timeout sets the token at the step's deadline, then fails X_JOB_TIMEOUT."""
    observed = []

    @declared(step_timeout="100ms")
    def slow_step(ctx):
        def work():
            observed.append(ctx.cancellation.wait(5))
            return "late"

        return ctx.step.run("slow", work)

    enqueued = slow_step.enqueue()
    (execution,) = drain(driver)
    assert observed == [True]
    assert execution.outcome == "retried"
    assert driver.get(enqueued.id).last_error.startswith("X_JOB_TIMEOUT")
    assert driver.steps.list(enqueued.id).get("slow") is None or (
        driver.steps.list(enqueued.id)["slow"].status != "completed"
    )
