"""``django_ultimate_jobs.operator``: the verbs the admin and ``jobs`` share.

Each refusal is checked on both drivers: the operator module must refuse
the same input with the same code whichever driver is installed, and
before anything is written.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_ultimate_jobs import operator
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.base import AckRequest, ClaimOptions, NackRequest
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.ids import uuid7
from tests.jobsapp.jobs import charge, noop

UNKNOWN = "01939b2c-0000-7000-8000-000000000000"


@pytest.fixture(params=["postgres", "memory"])
def driver(request, clock, db):
    if request.param == "postgres":
        yield request.getfixturevalue("pg_driver")
        return
    memory = MemoryDriver(clock=clock)
    previous = set_driver(memory)
    yield memory
    set_driver(previous)
    memory.close()


def refused(code, call, *args, **kwargs):
    with pytest.raises(JobsError) as info:
        call(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


def settle(driver, queue="default", *, dead=False):
    (claimed,) = driver.claim(
        ClaimOptions(queues=[queue], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    if dead:
        request = NackRequest(
            job_id=claimed.id, identity=claimed.identity, dead_letter=True, error="X_NO"
        )
        assert driver.nack(request)
    else:
        assert driver.ack(AckRequest(job_id=claimed.id, identity=claimed.identity))
    return claimed


def test_single_verb_refusals(driver):
    """Unknown, live, finished and running jobs are refused with their codes."""
    refused("X_JOB_NOT_FOUND", operator.retry, UNKNOWN)
    refused("X_JOB_NOT_FOUND", operator.promote, UNKNOWN)
    refused("X_JOB_NOT_FOUND", operator.remove, UNKNOWN)
    refused("X_JOB_NOT_CANCELLABLE", operator.cancel, UNKNOWN)
    ready = noop.enqueue(n=1)
    refused("X_JOB_NOT_REQUEUEABLE", operator.retry, str(ready.id))
    settle(driver)
    refused("X_JOB_NOT_CANCELLABLE", operator.cancel, str(ready.id))
    refused("X_JOB_NOT_PROMOTABLE", operator.promote, str(ready.id))
    running = noop.enqueue(n=2)
    driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    )
    refused("X_JOB_NOT_REMOVABLE", operator.remove, str(running.id))
    refused("X_JOB_ID_INVALID", operator.show, "nope")


def test_requeue_refused_while_a_live_job_holds_the_key(driver):
    """A dead job whose key a live job holds stays dead: X_JOB_DUPLICATE."""
    first = charge.enqueue(invoice_id=7, org_id="acme")
    settle(driver, "billing", dead=True)
    holder = charge.enqueue(invoice_id=7, org_id="acme")
    error = refused("X_JOB_DUPLICATE", operator.retry, str(first.id))
    assert error.meta["holder"] == str(holder.id)
    assert operator.show(str(first.id))["state"] == "dead"


def test_bulk_refusals_happen_before_any_write(driver):
    """Bulk verbs refuse states they cannot move, and nothing changes."""
    noop.enqueue(n=1)
    refused("X_JOB_NOT_REQUEUEABLE", operator.requeue_many, state="ready")
    refused("X_JOB_NOT_REMOVABLE", operator.remove_many, state="running")
    refused("X_JOB_NOT_PROMOTABLE", operator.promote_many, state="dead")
    refused("X_JOB_PAGE_INVALID", operator.requeue_many, state="bogus")
    assert [j["state"] for j in operator.list_jobs()["jobs"]] == ["ready"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"limit": 0},
        {"limit": 201},
        {"limit": "10"},
        {"after": "not-a-cursor"},
        {"id_prefix": "xyz"},
        {"state": "exploded"},
        {"error_code": "X_A: b"},
        {
            "created_from": datetime(2030, 1, 2, tzinfo=UTC),
            "created_to": datetime(2030, 1, 1, tzinfo=UTC),
        },
    ],
)
def test_bad_pages_are_refused(driver, arguments):
    """A bad limit, cursor or filter is X_JOB_PAGE_INVALID."""
    refused("X_JOB_PAGE_INVALID", operator.list_jobs, **arguments)


BAD_FILTERS = [
    ({"error_code": "X_A:B"}, "error_code", "pass the code alone, e.g. X_JOB_TIMEOUT"),
    ({"id_prefix": "xyz"}, "id_prefix", "pass the first hex digits of a job id"),
    ({"queue": "a\x00b"}, "queue", "without NUL characters or lone surrogates"),
    ({"tenant": "a\ud800"}, "tenant", "without NUL characters or lone surrogates"),
    (
        {
            "created_from": datetime(2030, 1, 2, tzinfo=UTC),
            "created_to": datetime(2030, 1, 1, tzinfo=UTC),
        },
        "created_to",
        "pass a created_to later than created_from",
    ),
    ({"created_from": "garbage"}, "created_from", "pass created_from as a datetime"),
    (
        {"created_to": datetime(2030, 1, 1)},
        "created_to",
        "pass created_to as a datetime",
    ),
    ({"state": 5}, "state", "pass e.g. 'dead' or ['ready', 'dead']"),
    ({"state": []}, "state", "pass at least one state"),
]


@pytest.mark.parametrize(
    ("arguments", "field", "fix"), BAD_FILTERS, ids=[repr(a) for a, _, _ in BAD_FILTERS]
)
def test_each_bad_filter_is_refused_with_a_fix_of_its_own(
    driver, arguments, field, fix
):
    """X_JOB_PAGE_INVALID before any statement (a created_from of "garbage" was
    a DataError from PostgreSQL), naming the filter, with a fix for that filter
    rather than the limit-and-cursor advice."""
    error = refused("X_JOB_PAGE_INVALID", operator.list_jobs, **arguments)
    assert error.meta["filter"] == field
    assert fix in error.fix, error.fix


@pytest.mark.parametrize("states", [5, [], [["ready"]]], ids=repr)
def test_count_refuses_states_that_are_not_a_list_of_names(driver, states):
    """``count(states=5)`` was a TypeError and ``states=[]`` counted nothing
    silently: both are X_JOB_PAGE_INVALID."""
    refused("X_JOB_PAGE_INVALID", operator.count, states=states)


@pytest.mark.parametrize(
    ("queue", "cause"),
    [
        ("a\x00b", "queue holds a NUL character"),
        ("a\nb", "queue holds the non-printable character U+000A"),
        (" a", "queue must be written without surrounding spaces"),
        ("q" * 201, "queue must be at most 200 characters, not 201"),
    ],
    ids=["nul", "newline", "space", "long"],
)
def test_a_bad_queue_to_pause_says_what_is_wrong_and_how_to_name_one(
    driver, queue, cause
):
    """The cause names the actual problem; the fix is about queue names, not
    about job input."""
    for verb in (operator.pause_queue, operator.resume_queue):
        error = refused("X_JOB_INPUT_INVALID", verb, queue)
        assert error.cause.startswith(cause), error.cause
        assert error.fix.startswith("pass a queue name: a non-empty string of at most")
    assert operator.stats()["paused"] == []


@pytest.mark.parametrize("text", ["a\x00b", "a\ud800"], ids=["nul", "lone-surrogate"])
@pytest.mark.parametrize("field", ["queue", "name", "tenant", "error_code"])
def test_filters_postgres_cannot_store_are_refused(driver, field, text):
    """A NUL or a lone surrogate in a filter: X_JOB_PAGE_INVALID naming the
    filter, on the listing and on the bulk verbs (never a DataError)."""
    error = refused("X_JOB_PAGE_INVALID", operator.list_jobs, **{field: text})
    assert error.meta == {"filter": field}
    refused("X_JOB_PAGE_INVALID", operator.requeue_many, **{field: text})


@pytest.mark.parametrize("text", ["a\x00b", "a\ud800"], ids=["nul", "lone-surrogate"])
def test_text_arguments_postgres_cannot_store_are_refused(driver, text):
    """A queue to pause, a cancel reason: X_JOB_INPUT_INVALID, nothing written."""
    refused("X_JOB_INPUT_INVALID", operator.pause_queue, text)
    refused("X_JOB_INPUT_INVALID", operator.resume_queue, text)
    assert operator.stats()["paused"] == []
    ready = noop.enqueue(n=1)
    refused("X_JOB_INPUT_INVALID", operator.cancel, str(ready.id), reason=text)
    assert operator.show(str(ready.id))["state"] == "ready"


def test_retry_from_a_step_the_job_never_ran_is_refused(driver):
    """X_STEP_NOT_FOUND naming the run's steps; the job stays dead."""
    dead = noop.enqueue(n=1)
    settle(driver, dead=True)
    error = refused("X_STEP_NOT_FOUND", operator.retry, str(dead.id), from_step="x")
    assert error.meta == {"id": str(dead.id), "step": "x", "steps": []}
    assert operator.show(str(dead.id))["state"] == "dead"


def test_count_answers_one_number_per_filter(driver):
    """count() narrows by queue, state(s) and name, and refuses unknown states."""
    for n in range(3):
        noop.enqueue(n=n)
    settle(driver, dead=True)
    charge.enqueue(invoice_id=1, org_id="o")
    assert operator.count() == 4
    assert operator.count(queue="default") == 3
    assert operator.count(queue="default", states="ready") == 2
    assert operator.count(states=["ready", "dead"], name="tests.noop") == 3
    assert operator.count(queue="billing", states=("dead",)) == 0
    error = refused("X_JOB_PAGE_INVALID", operator.count, states=["ready", "gone"])
    assert "'gone'" in error.cause and "dead" in error.fix


def test_list_jobs_pages_with_a_cursor_and_filters(driver):
    """Pages chain through ``next``; the last (short) page answers None."""
    ids = [noop.enqueue(n=n).id for n in range(5)]
    ids.sort(reverse=True)
    first = operator.list_jobs(limit=3)
    assert [j["id"] for j in first["jobs"]] == [str(i) for i in ids[:3]]
    second = operator.list_jobs(limit=3, after=first["next"])
    assert [j["id"] for j in second["jobs"]] == [str(i) for i in ids[3:]]
    assert second["next"] is None
    prefix = str(ids[0])[:13]
    listed = operator.list_jobs(id_prefix=prefix)["jobs"]
    assert str(ids[0]) in [j["id"] for j in listed]
    assert all(j["id"].startswith(prefix) for j in listed)
    assert operator.list_jobs(state="dead")["jobs"] == []


def test_bulk_verbs_answer_affected_and_remaining(driver, clock):
    """requeue_many, promote_many and remove_many each report what is left."""
    for n in range(3):
        noop.enqueue(n=n)
        settle(driver, dead=True)
    assert operator.requeue_many(state="dead", name="tests.noop") == {
        "affected": 3,
        "remaining": 0,
    }
    delayed = noop.using(delay="1h").enqueue(n=9)
    assert operator.promote_many() == {"affected": 1, "remaining": 0}
    assert operator.show(str(delayed.id))["state"] == "ready"
    assert operator.remove_many(name="tests.noop") == {"affected": 4, "remaining": 0}
    assert operator.list_jobs()["jobs"] == []


def test_show_redacts_secret_input_keys(driver):
    """Keys named in REDACT_KEYS are hidden, at any depth, case-insensitively."""
    enqueued = noop.enqueue(user={"Password": "hunter2", "name": "ann"}, api_key="k")
    shown = operator.show(str(enqueued.id))
    assert shown["input"] == {
        "user": {"Password": "[redacted]", "name": "ann"},
        "api_key": "[redacted]",
    }
    with override_settings(ULTIMATE_JOBS={"REDACT_KEYS": ["name"]}):
        set_driver(driver)
        assert operator.show(str(enqueued.id))["input"]["user"]["name"] == "[redacted]"


def test_counters_sum_the_window(driver, clock):
    """Counters answer per job name what settled in the window."""
    noop.enqueue(n=1)
    settle(driver)
    noop.enqueue(n=2)
    settle(driver, dead=True)
    (totals,) = [c for c in operator.counters() if c["job"] == "tests.noop"]
    assert (totals["done"], totals["dead"]) == (1, 1)
    clock.advance(days=2)
    assert operator.counters(window=timedelta(hours=1)) == []
    assert uuid7()  # ids stay unique across the clock move
