"""The ``django.tasks`` backend: Django's ``@task`` functions as durable jobs.

Runs on Django 6.x (``django.tasks``) and on 5.2 with the ``django-tasks``
backport. Tasks live in tests/tasksapp/tasks.py; ``run_jobs()`` drains them
through the real worker path on a frozen clock, and two tests use other
processes (a ``runjobs`` worker and a ``get_result`` reader).
"""

from __future__ import annotations

import json
import logging
import os
import signal as signals
import subprocess
import sys
import time
from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from asgiref.sync import async_to_sync
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.migrations.recorder import MigrationRecorder
from django.test import override_settings

from django_ultimate_jobs.tasks.compat import SOURCE

if SOURCE is None:
    # A failure, not a skip: the dev extra installs the backport, so a
    # missing one is a broken set-up, and a skip would pass the backend
    # untested.
    pytest.fail(
        "neither django.tasks (Django 6+) nor the django-tasks backport is "
        "installed: pip install -e '.[dev]'",
        pytrace=False,
    )

from django_ultimate_jobs import Terminal, job, job_enqueued
from django_ultimate_jobs.backends import UltimateJobsBackend, UltimateTask
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.base import ClaimOptions, EnqueueRequest
from django_ultimate_jobs.errors import JobInputInvalid, JobLeaseLost, JobTimeout
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.retry import Retry
from django_ultimate_jobs.tasks.bridge import TASK_JOB
from django_ultimate_jobs.tasks.compat import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_ultimate_jobs.tasks.errors import TaskInputInvalid
from django_ultimate_jobs.tasks.payload import TaskPayload
from django_ultimate_jobs.tasks.policy import TaskPolicy
from django_ultimate_jobs.testing import run_jobs
from tests.support.values import nested
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT, WorkerProcess, subprocess_env
from tests.tasksapp import tasks

if SOURCE == "django.tasks":
    from django.tasks import task
    from django.tasks.exceptions import TaskResultMismatch
else:
    from django_tasks import task
    from django_tasks.exceptions import TaskResultMismatch

pytestmark = pytest.mark.postgres

TASKS_BACKEND = "django_ultimate_jobs.backends.UltimateJobsBackend"
READY = TaskResultStatus.READY
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED


@pytest.fixture(autouse=True)
def _fresh_calls():
    tasks.CALLS.clear()
    yield
    tasks.CALLS.clear()


def backend() -> UltimateJobsBackend:
    found = task_backends["default"]
    assert isinstance(found, UltimateJobsBackend)
    return found


def row(driver, result):
    return driver.get(UUID(result.id))


def drain(**kwargs):
    return run_jobs(queues=["default", "emails"], **kwargs)


def later(clock, **delta):
    clock.advance(timedelta(**delta))


def module_level(a=None):
    """A plain function that tests wrap with ``task(...)`` to check definitions."""
    return a


# -- the backend --------------------------------------------------------------------


def test_the_backend_supports_everything_and_uses_its_task_class():
    """All four supports_* flags are set; @task builds an UltimateTask."""
    found = backend()
    assert found.supports_defer
    assert found.supports_async_task
    assert found.supports_get_result
    assert found.supports_priority
    assert isinstance(tasks.add, UltimateTask)
    assert tasks.always_fails.attempts == 2


@pytest.mark.parametrize(
    "params, words",
    [
        ({"OPTIONS": {"bogus": 1}}, "unknown option bogus"),
        ({"OPTIONS": {"attempts": 0}}, "attempts"),
        ({"OPTIONS": {"timeout": "soon"}}, "timeout"),
        ({"OPTIONS": ["attempts"]}, "must be a dict"),
        ({"QUEUES": [" padded"]}, "invalid queue names"),
    ],
)
def test_invalid_options_are_refused_when_the_backend_is_built(params, words):
    """OPTIONS and QUEUES are checked at once: InvalidTaskBackend (ImproperlyConfigured)."""
    with pytest.raises(InvalidTaskBackend, match=words) as raised:
        UltimateJobsBackend("broken", params)
    assert isinstance(raised.value, ImproperlyConfigured)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"attempts": 0}, "attempts"),
        ({"backoff": "sideways"}, "backoff"),
        ({"delay": "-1s"}, "delay"),
        ({"timeout": 0}, "timeout"),
        ({"idempotency_key": 5}, "idempotency_key"),
        ({"queue_name": "nowhere"}, "nowhere"),
        ({"priority": 101}, "priority"),
    ],
)
def test_invalid_task_definitions_are_refused_at_decoration(options, words):
    """Per-task policy, key and Django's own rules raise InvalidTask at import."""
    with pytest.raises(InvalidTask, match=words):
        task(**options)(module_level)


# -- enqueue, run, results ----------------------------------------------------------


def test_a_task_runs_and_its_result_is_stored(pg_driver, clock):
    """enqueue answers READY; after the worker, SUCCESSFUL with the return value."""
    with transaction.atomic():
        result = tasks.add.enqueue(2, 3)
    assert result.status == READY
    assert result.args == [2, 3] and result.kwargs == {}
    assert result.backend == "default"
    assert result.enqueued_at == clock.now()
    assert result.worker_ids == [] and result.errors == []
    assert backend().get_result(result.id).status == READY
    (execution,) = drain()
    assert execution.outcome == "completed"
    assert execution.claimed.name == TASK_JOB
    done = tasks.add.get_result(result.id)
    assert done.status == SUCCESSFUL
    assert done.return_value == 5
    assert done.worker_ids == ["run_jobs"] and done.attempts == 1
    assert done.errors == []
    assert done.enqueued_at == clock.now()
    assert done.started_at == done.last_attempted_at == clock.now()
    assert done.finished_at == clock.now()
    assert done.task.func is tasks.add.func
    result.refresh()
    assert result.status == SUCCESSFUL and result.return_value == 5


def test_enqueue_answers_the_enqueued_at_the_row_stores(committed_pg_driver):
    """enqueued_at is the row's created_at, the transaction's now(), in every read.

    Not a clock reading taken after the insert: inside atomic() the two
    differ by however long the transaction has run.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            (began,) = cursor.fetchone()
        result = tasks.add.enqueue(1, 2)
        assert result.enqueued_at == began
    assert tasks.add.get_result(result.id).enqueued_at == began
    result.refresh()
    assert result.enqueued_at == began


def test_a_task_that_fails_twice_then_succeeds(pg_driver, clock):
    """Three attempts, two TaskErrors, SUCCESSFUL, return_value set; READY between."""
    result = tasks.flaky.enqueue(2)
    (first,) = drain()
    assert first.outcome == "retried"
    waiting = tasks.flaky.get_result(result.id)
    assert waiting.status == READY  # a retry waiting reads READY
    assert len(waiting.errors) == 1 and waiting.worker_ids == ["run_jobs"]
    later(clock, minutes=2)
    (second,) = drain()
    assert second.outcome == "retried"
    later(clock, minutes=2)
    (third,) = drain()
    assert third.outcome == "completed"
    done = tasks.flaky.get_result(result.id)
    assert done.status == SUCCESSFUL
    assert done.attempts == 3
    assert done.worker_ids == ["run_jobs"] * 3
    assert done.return_value == {
        "attempt": 3,
        "result_id": result.id,
        "workers": ["run_jobs"] * 3,
    }
    assert [e.exception_class_path for e in done.errors] == ["builtins.ValueError"] * 2
    assert all(e.exception_class is ValueError for e in done.errors)
    assert "failing on attempt 1" in done.errors[0].traceback
    # The latest failure keeps its whole traceback (with the task's own frame).
    assert "Traceback (most recent call last)" in done.errors[1].traceback
    assert "failing on attempt 2" in done.errors[1].traceback
    assert row(pg_driver, result).max_attempts == 3


def test_exhausted_attempts_read_failed_with_one_error_each(pg_driver, clock):
    """@task(attempts=2): two attempts, two errors, FAILED; return_value refuses."""
    result = tasks.always_fails.enqueue()
    assert row(pg_driver, result).max_attempts == 2
    drain()
    later(clock, seconds=11)  # backoff="fixed", delay="10s"
    (last,) = drain()
    assert last.outcome == "dead-lettered"
    failed = tasks.always_fails.get_result(result.id)
    assert failed.status == FAILED and failed.finished_at == clock.now()
    assert [e.exception_class for e in failed.errors] == [RuntimeError, RuntimeError]
    with pytest.raises(ValueError, match="failed"):
        failed.return_value  # noqa: B018


def test_terminal_errors_keep_their_classification(pg_driver):
    """A task raising Terminal stops at once; its class path is recorded."""
    result = tasks.refuses.enqueue()
    (execution,) = drain()
    assert execution.outcome == "dead-lettered" and execution.stop == "terminal"
    failed = tasks.refuses.get_result(result.id)
    assert failed.status == FAILED and failed.attempts == 1
    (error,) = failed.errors
    assert error.exception_class_path == "django_ultimate_jobs.errors.Terminal"


def test_async_tasks_run_with_and_without_context(pg_driver):
    """async def tasks run to SUCCESSFUL; the context reads attempt 1."""
    doubled = tasks.async_double.enqueue(21)
    attempt = tasks.async_context.enqueue()
    drain()
    assert tasks.async_double.get_result(doubled.id).return_value == 42
    assert tasks.async_context.get_result(attempt.id).return_value == 1


def test_a_task_timeout_cancels_an_async_task(pg_driver):
    """@task(timeout="200ms"): the coroutine is cancelled; X_JOB_TIMEOUT recorded."""
    result = tasks.async_sleeper.enqueue(30)
    started = time.monotonic()
    (execution,) = drain()
    assert time.monotonic() - started < 10
    assert execution.outcome == "dead-lettered"
    failed = tasks.async_sleeper.get_result(result.id)
    assert failed.status == FAILED
    assert failed.errors[0].exception_class is JobTimeout


def test_a_sync_task_that_returns_after_its_timeout_fails(pg_driver):
    """A sync body cannot be stopped: returning late still counts as a timeout."""
    result = tasks.sync_sleeper.enqueue(0.4)
    drain()
    failed = tasks.sync_sleeper.get_result(result.id)
    assert failed.status == FAILED
    assert failed.errors[0].exception_class is JobTimeout


def test_a_deferred_task_waits_for_run_after(pg_driver, clock):
    """run_after: not claimed before it; READY until then; runs after."""
    when = clock.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=when).enqueue(1, 1)
    assert drain() == []
    waiting = tasks.add.get_result(result.id)
    assert waiting.status == READY
    assert waiting.task.run_after == when
    later(clock, hours=2)
    (execution,) = drain()
    assert execution.outcome == "completed"
    assert tasks.add.get_result(result.id).return_value == 2


def test_higher_priority_tasks_run_first(pg_driver):
    """Among due tasks of a queue, higher priority is claimed first."""
    for label, priority in [("low", -50), ("mid", 0), ("top", 100), ("high", 10)]:
        tasks.record.using(priority=priority).enqueue(label)
    drain(claim_batch=1)
    assert tasks.CALLS == ["top", "high", "mid", "low"]
    stored = pg_driver.get(UUID(tasks.record.using(priority=7).enqueue("x").id))
    assert stored.priority == 7
    assert backend().get_result(str(stored.id)).task.priority == 7


def test_tasks_run_on_their_queue(pg_driver):
    """queue_name is the job's queue; a worker on other queues leaves it."""
    result = tasks.send_email.enqueue("a@example.com")
    assert row(pg_driver, result).queue == "emails"
    assert run_jobs(queues=["default"]) == []
    run_jobs(queues=["emails"])
    assert tasks.CALLS == ["email:a@example.com"]
    done = tasks.send_email.get_result(result.id)
    assert done.task.queue_name == "emails" and done.backend == "second"
    with pytest.raises(InvalidTask, match="emails"):
        tasks.add.using(queue_name="emails")  # not in TASKS["default"]["QUEUES"]


def test_a_rolled_back_enqueue_leaves_no_result(pg_driver):
    """enqueue joins atomic(): a rollback takes the row (and the result) with it."""

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert tasks.add.get_result(result.id).status == READY
        raise Boom
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result.id)
    assert drain() == []


def test_unknown_malformed_and_foreign_ids_do_not_exist(pg_driver):
    """Unknown, malformed, non-task jobs and other aliases' results: DoesNotExist."""

    @job(name="t.tasks.plain")
    def plain(ctx):
        return None

    try:
        foreign = plain.enqueue()
        other_alias = tasks.add.using(backend="second").enqueue(1, 1)
        for bad in [str(uuid4()), "not-a-uuid", "", str(foreign.id), other_alias.id]:
            with pytest.raises(TaskResultDoesNotExist):
                backend().get_result(bad)
        second = task_backends["second"].get_result(other_alias.id)
        assert second.backend == "second" and second.task.backend == "second"
        with pytest.raises(TaskResultMismatch):
            tasks.echo.using(backend="second").get_result(second.id)
    finally:
        unregister("t.tasks.plain")


def test_a_task_enqueued_on_another_alias_runs_there(pg_driver):
    """task.using(backend=...) stores the alias; the worker runs it bound to it."""
    result = tasks.add.using(backend="second").enqueue(4, 4)
    drain()
    done = task_backends["second"].get_result(result.id)
    assert done.status == SUCCESSFUL and done.return_value == 8


def test_aenqueue_and_aget_result(pg_driver):
    """The async API goes through the same enqueue and read."""
    result = async_to_sync(tasks.add.aenqueue)(5, 6)
    drain()
    done = async_to_sync(tasks.add.aget_result)(result.id)
    assert done.return_value == 11
    async_to_sync(result.arefresh)()
    assert result.status == SUCCESSFUL


# -- arguments and keys ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((object(),), {}),
        ((), {"when": timedelta(seconds=1)}),
        (({1: "a", "1": "b"},), {}),
        ((float("nan"),), {}),
        (("nul\x00",), {}),
        ((b"\xff",), {}),
    ],
    ids=["object", "timedelta", "colliding-keys", "nan", "nul", "bad-bytes"],
)
def test_arguments_json_cannot_hold_are_refused(pg_driver, args, kwargs):
    """Refused before any write: TaskInputInvalid, X_JOB_INPUT_INVALID.

    Both a TypeError and a ValueError, the two classes Django's
    normalize_json raises (a datetime; undecodable bytes), so an ``except``
    written for Django's backends catches it; it was only a TypeError.
    """
    with pytest.raises(TaskInputInvalid) as raised:
        tasks.echo.enqueue(*args, **kwargs)
    assert isinstance(raised.value, TypeError)
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, JobInputInvalid)
    assert raised.value.code == "X_JOB_INPUT_INVALID"
    assert drain() == []


def test_except_value_error_catches_what_django_raises_value_error_for(pg_driver):
    """Undecodable bytes: Django raises ValueError ("Unsupported value");
    code written ``except ValueError`` for it keeps working here, and the
    refusal names the argument."""
    try:
        tasks.echo.enqueue("fine", b"\xff")
    except ValueError as error:
        caught = error
    assert isinstance(caught, TaskInputInvalid)
    assert "are not JSON-safe: args[1]" in caught.cause
    with pytest.raises(TypeError) as raised:  # Django: TypeError for a type
        tasks.echo.enqueue(when=timedelta(seconds=1))
    assert "are not JSON-safe: kwargs['when']" in raised.value.cause
    assert drain() == []


def test_dict_keys_are_normalised_as_djangos_backends_store_them(pg_driver):
    """``{1: "a"}`` arrives as ``{"1": "a"}``: in the enqueued result, in the
    task's call and in every later read (it was refused). As JSON writes
    keys: numbers as their repr, True/None as JSON's words."""
    nested = [{2: {3.5: True, None: 1, False: 0}}]
    result = tasks.echo.enqueue({1: "a"}, nested=nested)
    expected_args = [{"1": "a"}]
    expected_kwargs = {"nested": [{"2": {"3.5": True, "null": 1, "false": 0}}]}
    assert (result.args, result.kwargs) == (expected_args, expected_kwargs)
    drain()
    done = tasks.echo.get_result(result.id)
    assert done.status == SUCCESSFUL
    assert (done.args, done.kwargs) == (expected_args, expected_kwargs)
    assert done.return_value == {"args": expected_args, "kwargs": expected_kwargs}


def test_the_job_api_stays_strict_about_keys(pg_driver):
    """``@job`` input is not normalised: an int key is still refused there."""
    from tests.jobsapp.jobs import noop

    with pytest.raises(JobInputInvalid) as raised:
        noop.enqueue(by_id={1: "a"})
    assert "by_id has a key of type int" in raised.value.cause


@pytest.mark.parametrize("depth", [101, 10_000])
def test_arguments_nested_too_deep_are_refused_with_a_code(pg_driver, depth):
    """Past 100 levels, X_JOB_INPUT_INVALID; never a bare RecursionError."""
    with pytest.raises(TaskInputInvalid) as raised:
        tasks.echo.enqueue(nested(depth))
    assert raised.value.code == "X_JOB_INPUT_INVALID"
    assert drain() == []


def test_arguments_are_normalised_like_django(pg_driver):
    """Tuples become lists and bytes strings, as Django's TaskResult does."""
    result = tasks.echo.enqueue((1, 2), b"raw", flag=True)
    assert result.args == [[1, 2], "raw"]
    drain()
    assert tasks.echo.get_result(result.id).return_value == {
        "args": [[1, 2], "raw"],
        "kwargs": {"flag": True},
    }


def test_whole_floats_stay_floats_in_arguments_and_return_values(pg_driver):
    """A float that is a whole number (1e16, 2.0) survives as a float.

    Django's contract: arguments survive a JSON round trip unchanged. jsonb
    prints 1e16 back as 10000000000000000, which read back as an int: in
    the task's arguments, in the stored ones and in the return value.
    """
    args = [1e16, -2.5e20, 1.5e300, 2.0, 0.5, 10**16, [3e17, "1e+16"]]
    result = tasks.kinds.enqueue(*args, big=1e16, small=1e-7)
    sent = tasks.kinds_of([args, {"big": 1e16, "small": 1e-7}])
    drain()
    done = tasks.kinds.get_result(result.id)
    assert done.status == SUCCESSFUL
    assert done.return_value["received"] == sent  # what the task was called with
    assert tasks.kinds_of([done.args, done.kwargs]) == sent  # what was stored
    returned = done.return_value
    assert tasks.kinds_of([returned["args"], {"big": returned["big"]}]) == [
        sent[0],
        {"big": "float"},
    ]
    assert returned["args"] == args and returned["big"] == 1e16


def test_an_idempotency_key_answers_the_live_task(pg_driver):
    """One live run per key: a second enqueue answers the first's result."""
    received = []
    task_enqueued.connect(
        lambda **kw: received.append(kw), weak=False, dispatch_uid="t"
    )
    try:
        first = tasks.keyed.enqueue(7)
        again = tasks.keyed.enqueue(7)
        other = tasks.keyed.enqueue(8)
    finally:
        task_enqueued.disconnect(dispatch_uid="t")
    assert again.id == first.id and other.id != first.id
    assert len(received) == 2  # the dedupe enqueued nothing
    assert row(pg_driver, first).idempotency_key == "tests.tasksapp.tasks.keyed:order:7"
    drain()
    assert tasks.keyed.enqueue(7).id != first.id  # the key is free once finished


def test_the_policy_is_stored_with_each_job(pg_driver):
    """OPTIONS merged with the task's keywords, stored in the job's input."""
    stored = row(pg_driver, tasks.always_fails.enqueue()).input
    assert stored["retry"] == {
        "attempts": 2,
        "backoff": "fixed",
        "delay_ms": 10_000,
        "max_delay_ms": 60_000,  # OPTIONS max_delay
        "jitter": "equal",
    }
    assert row(pg_driver, tasks.async_sleeper.enqueue(1)).input["timeout_ms"] == 200


# -- refusals ---------------------------------------------------------------------------


def _bridge_row(pg_driver, **changes):
    payload = TaskPayload(
        module_path="tests.tasksapp.tasks.record",
        args=["x"],
        kwargs={},
        backend="default",
        takes_context=False,
        policy=TaskPolicy(retry=Retry(attempts=3)),
    ).to_input()
    payload.update(changes)
    return pg_driver.enqueue(EnqueueRequest(name=TASK_JOB, input=payload)).id


@pytest.mark.parametrize(
    "changes, words",
    [
        (
            {"module_path": "tests.tasksapp.tasks.plain_function"},
            "not a django.tasks Task",
        ),
        ({"module_path": "os.getcwd"}, "not a django.tasks Task"),
        ({"module_path": "tests.tasksapp.tasks.on_immediate"}, "not a django-ultimate"),
        ({"module_path": "tests.tasksapp.nowhere.task"}, "cannot be imported"),
        ({"backend": "immediate"}, "not a django-ultimate-jobs backend"),
        ({"backend": "nope"}, "not configured"),
        ({"args": "x"}, "malformed"),
        ({"retry": {"attempts": 0}}, "malformed"),
    ],
)
def test_the_worker_refuses_anything_but_a_task_of_this_backend(
    pg_driver, changes, words
):
    """Hand-written rows never call arbitrary code: X_TASK_INVALID, not retried."""
    job_id = _bridge_row(pg_driver, **changes)
    (execution,) = drain()
    assert execution.outcome == "dead-lettered" and execution.stop == "terminal"
    assert execution.error.code == "X_TASK_INVALID"
    assert words in execution.error.cause
    assert tasks.CALLS == []
    assert pg_driver.get(job_id).attempt == 1


def test_complex_return_value(pg_driver, caplog):
    """Django's own test, adapted: a return value JSON cannot hold fails the
    task with the TypeError Django's backends record (it was TaskInvalid),
    "Unsupported type" in its traceback, and Django's task_finished receiver
    logs it. The task ran once: X_TASK_INVALID is not retried."""
    with caplog.at_level(logging.ERROR, logger=SOURCE):
        result = tasks.complex_return_value.enqueue()
        (execution,) = drain()
    assert execution.error.code == "X_TASK_INVALID"
    assert execution.stop == "terminal"
    assert tasks.CALLS == ["complex_return_value"]
    result.refresh()
    assert result.status == FAILED
    assert result.started_at is not None and result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.finished_at >= result.started_at >= result.enqueued_at
    assert result._return_value is None
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback
    assert result.attempts == 1
    assert [r for r in caplog.records if r.name.startswith(SOURCE)]


@pytest.mark.parametrize(
    ("task", "kind", "words"),
    [
        ("returns_object", TypeError, "TypeError: Unsupported type: <class 'object'>"),
        ("returns_nan", ValueError, "Out of range float values"),
    ],
)
def test_a_return_value_json_cannot_hold_records_its_exception_class(
    pg_driver, task, kind, words
):
    """The class normalising it raised, in errors[0] and the stored text.

    NaN is Django-normalisable but jsonb cannot hold it: the ValueError
    json raises for it is what the result records.
    """
    result = getattr(tasks, task).enqueue()
    (execution,) = drain()
    assert execution.stop == "terminal"
    failed = getattr(tasks, task).get_result(result.id)
    assert failed.status == FAILED
    (error,) = failed.errors
    assert error.exception_class is kind
    assert words in error.traceback
    assert pg_driver.get(UUID(result.id)).last_error.startswith(
        "X_TASK_INVALID: the task's return value is not JSON-safe: "
        f"builtins.{kind.__name__}: "
    )


# -- crash recovery --------------------------------------------------------------------


def test_a_crashed_attempt_is_recovered_and_counted(pg_driver, clock):
    """A worker that dies mid-run: the lease lapses, another worker finishes."""
    result = tasks.add.enqueue(3, 4)
    claim = ClaimOptions(
        queues=["default"], limit=1, worker_id="crashed", visibility_ms=1_000
    )
    (_claimed,) = pg_driver.claim(claim).claimed
    running = tasks.add.get_result(result.id)
    assert running.status == RUNNING and running.worker_ids == ["crashed"]
    later(clock, seconds=5)  # the lease lapses; nobody settles
    (execution,) = drain()
    assert execution.outcome == "completed"
    done = tasks.add.get_result(result.id)
    assert done.status == SUCCESSFUL and done.return_value == 7
    assert done.worker_ids == ["crashed", "run_jobs"]
    assert [e.exception_class for e in done.errors] == [JobLeaseLost]


def test_the_memory_driver_runs_tasks_too(clock):
    """Users' tests on DRIVER "memory": enqueue, retry, results, no database."""
    from django_ultimate_jobs.drivers.memory import MemoryDriver

    previous = set_driver(MemoryDriver(clock=clock))
    try:
        result = tasks.flaky.enqueue(1)
        drain()
        later(clock, minutes=2)
        drain()
        done = tasks.flaky.get_result(result.id)
        assert done.status == SUCCESSFUL and done.attempts == 2
        assert [e.exception_class for e in done.errors] == [ValueError]
    finally:
        set_driver(previous)


# -- signals ------------------------------------------------------------------------------


def test_the_three_signals_are_sent_with_the_backend_as_sender(pg_driver, clock):
    """task_enqueued at enqueue, task_started per attempt, task_finished at the end."""
    seen = []

    def receiver(signal_name):
        def receive(sender, task_result, **kwargs):
            seen.append((signal_name, sender, task_result.status, task_result.attempts))

        return receive

    receivers = {
        task_enqueued: receiver("enqueued"),
        task_started: receiver("started"),
        task_finished: receiver("finished"),
    }
    jobs_seen = []
    for signal, function in receivers.items():
        signal.connect(function)
    job_enqueued.connect(
        lambda **kw: jobs_seen.append(kw), weak=False, dispatch_uid="t"
    )
    try:
        tasks.flaky.enqueue(1)
        drain()
        later(clock, minutes=2)
        drain()
    finally:
        for signal, function in receivers.items():
            signal.disconnect(function)
        job_enqueued.disconnect(dispatch_uid="t")
    assert seen == [
        ("enqueued", UltimateJobsBackend, READY, 0),
        ("started", UltimateJobsBackend, RUNNING, 1),
        ("started", UltimateJobsBackend, RUNNING, 2),
        ("finished", UltimateJobsBackend, SUCCESSFUL, 2),
    ]
    assert len(jobs_seen) == 1 and jobs_seen[0]["job"].name == TASK_JOB


# Django's own django.tasks logs as "django.tasks"; the backport (Django 5.2)
# as "django_tasks".
TASKS_LOGGER = SOURCE or "django.tasks"


def test_task_finished_is_sent_while_the_failure_is_handled(pg_driver, caplog):
    """A failed task's task_finished sees its exception in sys.exc_info().

    As Django's ImmediateBackend sends it from its except block: Django's own
    receiver logs the failure with exc_info, so the log line has the traceback.
    """
    seen = {}

    def receive(sender, task_result, **kwargs):
        seen[task_result.id] = (task_result.status, sys.exc_info()[1])

    task_finished.connect(receive)
    try:
        with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
            refused = tasks.refuses.enqueue()
            added = tasks.add.enqueue(1, 1)
            drain()
    finally:
        task_finished.disconnect(receive)
    status, handled = seen[refused.id]
    assert status == FAILED
    assert isinstance(handled.__cause__, Terminal)
    assert seen[added.id] == (SUCCESSFUL, None)
    assert sys.exc_info() == (None, None, None)
    (logged,) = [
        record
        for record in caplog.records
        if record.name == TASKS_LOGGER and "state=FAILED" in record.getMessage()
    ]
    assert logged.exc_info is not None and logged.exc_info[1] is handled
    assert "the card was declined" in caplog.text
    assert "in refuses" in caplog.text  # the task's own frame


# -- checks -----------------------------------------------------------------------------


def _ids(messages):
    return sorted(message.id for message in messages)


def test_check_runs_through_djangos_checks(pg_driver):
    """Django's check_tasks calls check(); a well-configured backend is silent."""
    assert backend().check() == []
    assert task_backends["second"].check() == []
    assert not [m for m in run_checks() if (m.id or "").startswith("ultimate_jobs.")]
    tasks_setting = {
        "default": {"BACKEND": TASKS_BACKEND, "QUEUES": ["default", "emails"]}
    }
    with override_settings(TASKS=tasks_setting):
        assert "ultimate_jobs.W103" in _ids(run_checks())


def test_check_warns_about_queues_no_worker_claims(pg_driver):
    """QUEUES outside ULTIMATE_JOBS['QUEUES']: W103."""
    found = UltimateJobsBackend("x", {"QUEUES": ["default", "emails", "sms"]})
    (warning,) = found.check()
    assert warning.id == "ultimate_jobs.W103"
    assert "emails, sms" in warning.msg


def test_check_warns_about_missing_migrations(pg_driver):
    """An unapplied migration of this app: W101 (a warning, so migrate still runs)."""
    recorder = MigrationRecorder(connection)
    recorder.record_unapplied("ultimate_jobs", "0001_initial")
    assert "ultimate_jobs.W101" in _ids(backend().check())


def test_check_refuses_a_database_that_is_not_postgresql(pg_driver, monkeypatch):
    """E102 when the jobs database is not PostgreSQL."""
    monkeypatch.setattr(connection, "vendor", "sqlite")
    assert "ultimate_jobs.E102" in _ids(backend().check())


def test_check_warns_about_a_transaction_pooler(pg_driver, monkeypatch):
    """W102 when the alias looks PgBouncer-pooled and prepared statements are on."""
    # The alias's settings, which the check reads: not this thread's
    # connection.settings_dict, a copy once a worker role named the connection.
    monkeypatch.setitem(
        connections.settings[DEFAULT_DB_ALIAS], "DISABLE_SERVER_SIDE_CURSORS", True
    )
    assert "ultimate_jobs.W102" in _ids(backend().check())


def test_check_reports_the_app_missing(monkeypatch):
    """E101 when django_ultimate_jobs is not installed."""
    from django_ultimate_jobs.tasks import checks

    monkeypatch.setattr(checks.apps, "is_installed", lambda name: False)
    assert _ids(backend().check()) == ["ultimate_jobs.E101"]


def test_check_skips_migrations_when_the_database_is_unreachable(monkeypatch):
    """No database: no W101 and no exception (``check`` must work offline)."""
    from django_ultimate_jobs.tasks import checks

    def unreachable(*args, **kwargs):
        raise OSError("connection refused")

    monkeypatch.setattr(
        "django.db.migrations.loader.MigrationLoader.__init__", unreachable
    )
    assert checks.unapplied_migrations("default") is None


# -- other processes ---------------------------------------------------------------------

_READ_SCRIPT = """
import json, sys
import django
django.setup()
from django_ultimate_jobs.tasks.compat import task_backends
out = []
for result_id in sys.argv[1:]:
    r = task_backends["default"].get_result(result_id)
    out.append({
        "status": str(r.status),
        "value": r.return_value if r.is_finished else None,
        "workers": r.worker_ids,
        "errors": [e.exception_class_path for e in r.errors],
        "args": r.args,
    })
print(json.dumps(out))
"""


@pytest.fixture
def process_env(transactional_db):
    """A subprocess environment on this test's (committed) database."""
    previous = set_driver(None)  # the settings' driver, on the real clock
    yield subprocess_env(connection.settings_dict)
    set_driver(previous)


def _run(argv, env, timeout=90):
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.acceptance
def test_runjobs_runs_tasks_and_any_process_reads_the_results(process_env):
    """Enqueued here, run by a runjobs process, read by a third process."""
    added = tasks.add.enqueue(20, 22)
    doubled = tasks.async_double.enqueue(8)
    _run(["-m", "django", "runjobs", "--burst", "--concurrency", "2"], process_env)
    (first, second) = json.loads(
        _run(["-c", _READ_SCRIPT, added.id, doubled.id], process_env).splitlines()[-1]
    )
    assert first["status"] == "SUCCESSFUL" and first["value"] == 42
    assert first["args"] == [20, 22] and first["errors"] == []
    assert second["status"] == "SUCCESSFUL" and second["value"] == 16
    (worker,) = first["workers"]
    assert worker not in ("run_jobs", "unknown")
    here = tasks.add.get_result(added.id)
    assert here.worker_ids == [worker] and here.return_value == 42


@pytest.mark.acceptance
def test_runjobs_runs_a_claimed_batch_in_priority_order(process_env):
    """Higher priority runs sooner inside one claim too (a batch of 64 rows).

    The low-priority tasks are enqueued first, so their rows come first in
    the table; one slot runs everything, so the run order is the order the
    claim handed the rows over.
    """
    for n in range(20):
        tasks.stamp.using(priority=-10).enqueue(f"low-{n}")
    for n in range(20):
        tasks.stamp.using(priority=10).enqueue(f"high-{n}")
    argv = ["-m", "django", "runjobs", "--burst", "--concurrency", "1"]
    _run(argv, {**process_env, "UJ_CLAIM_BATCH": "64"})
    ran = [
        tasks.stamp.get_result(str(job_id)).return_value
        for job_id in Job.objects.filter(name=TASK_JOB).values_list("id", flat=True)
    ]
    order = [value["label"] for value in sorted(ran, key=lambda value: value["ran"])]
    assert [label.split("-")[0] for label in order] == ["high"] * 20 + ["low"] * 20
    assert order[:20] == [f"high-{n}" for n in range(20)]


@pytest.mark.acceptance
def test_a_task_that_exits_or_interrupts_fails_and_the_worker_carries_on(
    process_env,
):
    """sys.exit(), exit() and KeyboardInterrupt in a task fail its attempt.

    As Django's ImmediateBackend records them: FAILED, the exception's class
    and traceback kept. One slot runs them all (priorities fix the order), so
    the task after them runs only if the slot survived, and --burst exits.
    """
    failing = [
        (tasks.exits.using(priority=4).enqueue(3), SystemExit, "sys.exit(code)"),
        (tasks.calls_exit.using(priority=3).enqueue(), SystemExit, "exit(5)"),
        (
            tasks.interrupted.using(priority=2).enqueue(),
            KeyboardInterrupt,
            "the task's own interrupt",
        ),
        (tasks.async_exits.using(priority=1).enqueue(6), SystemExit, "sys.exit(code)"),
    ]
    after = tasks.add.enqueue(1, 2)
    argv = ["-m", "django", "runjobs", "--burst", "--concurrency", "1"]
    _run(argv, process_env, timeout=60)
    for result, kind, words in failing:
        failed = backend().get_result(result.id)
        assert failed.status == FAILED and failed.attempts == 1, failed
        (error,) = failed.errors
        assert error.exception_class is kind
        assert "Traceback (most recent call last)" in error.traceback
        assert words in error.traceback
    done = tasks.add.get_result(after.id)
    assert done.status == SUCCESSFUL and done.return_value == 3


@pytest.mark.acceptance
def test_repeat_ctrl_c(process_env, tmp_path):
    """django-tasks' db_worker test, adapted: a second Ctrl-C while a task
    runs ends the worker at once with status 0 (runjobs exited 1).

    The first Ctrl-C starts the drain and the task (deaf to cancellation)
    keeps running; the second skips the drain. Unlike db_worker, the task
    is not marked FAILED: it stays RUNNING until its lease lapses.
    """
    flag = tmp_path / "hold"
    flag.touch()
    started = tmp_path / "hold.started"
    result = tasks.hang.enqueue(str(flag))
    worker = WorkerProcess(
        "runjobs",
        [sys.executable, "-m", "django", "runjobs", "--concurrency", "1"],
        process_env,
        tmp_path / "runjobs.log",
    )
    try:
        # Wait for the body itself: a claimed task reads RUNNING while it
        # may still wait its turn, and a drain hands such a task back at
        # once, so the worker would stop before the second Ctrl-C.
        wait_until(started.exists, 60, message=worker.tail)
        assert backend().get_result(result.id).status == RUNNING
        worker.send(signals.SIGINT)
        worker.wait_for_output("jobs.worker.draining", 30)
        assert worker.alive(), worker.tail()
        worker.send(signals.SIGINT)
        assert worker.wait_exit(30) == 0, worker.tail()
        assert "jobs.worker.exit-now" in worker.output()
        assert backend().get_result(result.id).status == RUNNING
    finally:
        flag.unlink(missing_ok=True)
        worker.terminate_group()


_MISSING_SCRIPT = """
import sys
sys.modules["django.tasks"] = None      # no Django 6 tasks ...
sys.modules["django_tasks"] = None      # ... and no backport
import django
django.setup()
from django_ultimate_jobs import backends
from django_ultimate_jobs.registry import get_job
assert get_job("django_ultimate_jobs.task") is None
try:
    backends.UltimateJobsBackend("default", {})
except Exception as error:
    print(type(error).__name__, error)
"""


def test_without_django_tasks_the_module_imports_and_says_what_is_missing():
    """No django.tasks and no backport: importable; building it names the package."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    out = _run(["-c", _MISSING_SCRIPT], env, timeout=60)
    assert out.startswith("ImproperlyConfigured")
    assert "pip install django-tasks" in out
