"""``ctx.write_on_ack``: writes the settle thread makes with the acks.

A body hands the worker a write (the webhook sender's record of a delivered
attempt is one); the settle thread calls each writer once per batch with
every item of it, in the transaction that marks those jobs done. What does
not succeed, or lost its lease, writes nothing; a write whose connection is
killed is written again with its batch, and the job still ends done once; a
writer's bug is logged and left out.
"""

from __future__ import annotations

import functools
import logging
import types

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_ultimate_jobs.models import Job
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.webhooks import create_endpoint, deliver
from django_ultimate_jobs.webhooks.models import WebhookDelivery
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.runner import Worker
from tests.support.backends import terminate_backends
from tests.support.waiting import wait_until
from tests.support.webhooks import LOOPBACK, hooks, server  # noqa: F401
from tests.support.workers import database_url, start_worker_thread

pytestmark = pytest.mark.postgres


def _states(ids):
    return dict(Job.objects.filter(id__in=ids).values_list("id", "state"))


def _outside(url, ids):
    """The jobs' states as another connection sees them (committed only)."""
    with psycopg.connect(url, autocommit=True) as other:
        rows = other.execute(
            "SELECT id, state FROM ultimate_jobs_job WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    return dict(rows)


@pytest.fixture
def table(transactional_db):
    """A table of ids with a primary key (a double write is an error):
    ``table.insert`` is a writer of ids, ``table.ids()`` reads them sorted."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE t_ack_writes (id uuid PRIMARY KEY)")

    def insert(items):
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO t_ack_writes (id) VALUES (%s)", [[i] for i in items]
            )

    def ids():
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM t_ack_writes")
            return sorted(row[0] for row in cursor.fetchall())

    yield types.SimpleNamespace(insert=insert, ids=ids)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE t_ack_writes")


def test_each_writer_gets_its_batch_in_the_transaction_of_the_acks(
    committed_pg_driver, declare_jobs
):
    """One call per writer with the items of every job that succeeded, in
    the transaction that marks them done: inside it they read done, while
    another connection still sees them running. A failed job gives nothing."""
    url = database_url(connection.settings_dict)
    calls = []

    def writer(items):
        calls.append(
            (
                list(items),
                connection.in_atomic_block,
                _states(items),
                _outside(url, items),
            )
        )

    @declare_jobs("aw", "t.aw")()
    def writes(ctx, *, fail: bool = False):
        ctx.write_on_ack(writer, ctx.job_id)
        if fail:
            raise RuntimeError("this attempt fails after asking for its write")

    done = [writes.enqueue().id for _ in range(4)]
    failed = writes.enqueue(fail=True).id
    run_jobs(queues=["aw"])

    written = [item for items, *_ in calls for item in items]
    assert sorted(written) == sorted(done)  # each once, the failure's never
    for _, atomic, inside, outside in calls:
        assert atomic
        assert set(inside.values()) == {"done"}, inside
        assert set(outside.values()) == {"running"}, outside
    assert set(_states(done).values()) == {"done"}
    assert Job.objects.get(id=failed).state != "done"


def test_an_attempt_that_lost_its_lease_writes_nothing(
    committed_pg_driver, declare_jobs
):
    """Another claim took the row while the body ran (the claim ordinal
    moved): its ack does not land, and neither does its write."""
    calls = []

    def writer(items):
        calls.append(list(items))

    @declare_jobs("awl", "t.awl")()
    def writes(ctx, *, steal: bool):
        ctx.write_on_ack(writer, ctx.job_id)
        if steal:
            with psycopg.connect(
                database_url(connection.settings_dict), autocommit=True
            ) as other:
                other.execute(
                    "UPDATE ultimate_jobs_job SET claims = claims + 1 WHERE id = %s",
                    (ctx.job_id,),
                )

    kept = writes.enqueue(steal=False).id
    stolen = writes.enqueue(steal=True).id
    run_jobs(queues=["awl"])
    assert [item for items in calls for item in items] == [kept]
    assert Job.objects.get(id=kept).state == "done"
    assert Job.objects.get(id=stolen).state == "running"


def test_a_writer_that_raises_is_logged_and_left_out(
    committed_pg_driver, declare_jobs, caplog, table
):
    """A writer's own error (not its database away) drops that writer's
    items with a log line naming it; the jobs end done, and the other
    writers of the batch are written once."""

    def broken(items):
        raise RuntimeError("a bug in the writer")

    @declare_jobs("awr", "t.awr")()
    def writes(ctx, *, bad: bool):
        ctx.write_on_ack(broken if bad else table.insert, ctx.job_id)

    ids = [writes.enqueue(bad=n % 2 == 0).id for n in range(6)]
    caplog.set_level(logging.INFO, logger="django_ultimate_jobs")
    run_jobs(queues=["awr"])
    assert set(_states(ids).values()) == {"done"}
    assert table.ids() == sorted(ids[1::2])
    (failed,) = [r for r in caplog.records if r.msg == "jobs.settle.write-failed"]
    assert failed.writer.endswith("broken") and failed.count == 3
    assert "a bug in the writer" in failed.error


class _AsyncCall:
    async def __call__(self, items):
        return None


def _generator(items):
    yield items


async def _later(items):
    return None


@pytest.mark.parametrize(
    "writer",
    [_later, functools.partial(_later), _AsyncCall(), _generator, 5, None],
    ids=["async", "partial", "async-call", "generator", "number", "none"],
)
def test_a_writer_that_cannot_be_called_is_refused(pg_driver, declare_jobs, writer):
    """Not callable, or answering a coroutine or a generator that nothing
    would run: X_JOB_WRITE_INVALID at the call, failing the attempt."""

    @declare_jobs("awi", "t.awi")()
    def writes(ctx):
        ctx.write_on_ack(writer, 1)

    job_id = writes.enqueue().id
    run_jobs(queues=["awi"])
    row = Job.objects.get(id=job_id)
    assert row.state in ("dead", "failed"), row.state
    assert row.last_error.startswith("X_JOB_WRITE_INVALID"), row.last_error


def _bad_writers():
    def caught(items):
        with connection.cursor() as cursor:
            try:
                cursor.execute("SELECT 1 / 0")
            except Exception:
                pass  # the transaction is failed now: every later statement too

    def marks_rollback(items):
        transaction.set_rollback(True)

    def exits(items):
        raise SystemExit(3)

    def returns_a_coroutine(items):
        return _later(items)

    def deadlocks(items):
        with connection.cursor() as cursor:
            cursor.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'a victim' USING ERRCODE = '40P01'; END $$"
            )

    def loses_its_connection(items):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    return {
        f.__name__: f
        for f in (
            caught,
            marks_rollback,
            exits,
            returns_a_coroutine,
            deadlocks,
            loses_its_connection,
        )
    }


@pytest.mark.parametrize("bad", sorted(_bad_writers()))
def test_what_a_writer_does_wrong_stays_its_own(
    committed_pg_driver, declare_jobs, caplog, table, bad
):
    """A failed transaction it swallowed, a rollback it asked for, SystemExit, a
    coroutine returned, a deadlock lost every time, its connection lost
    every time: that writer is logged and left out; every job of the batch
    ends done once, and the good writer's rows are there exactly once."""
    writer = _bad_writers()[bad]

    @declare_jobs("awb", "t.awb")()
    def writes(ctx, *, bad: bool):
        ctx.write_on_ack(writer if bad else table.insert, ctx.job_id)

    ids = [writes.enqueue(bad=n % 2 == 0).id for n in range(6)]
    caplog.set_level(logging.INFO, logger="django_ultimate_jobs")
    config = WorkerConfig.from_settings(
        queues=("awb",), visibility_ms=60_000, heartbeat_ms=20_000, poll_ms=50
    )
    worker = Worker(config, driver=committed_pg_driver)
    runner = start_worker_thread(worker)
    try:
        wait_until(
            lambda: set(_states(ids).values()) == {"done"},
            30,
            message=lambda: f"{_states(ids)} {caplog.text}",
        )
    finally:
        worker.request_stop(deadline_s=5)
        runner.join(10)
    rows = Job.objects.filter(id__in=ids)
    assert {(r.state, r.attempt, r.claims) for r in rows} == {("done", 1, 1)}
    assert table.ids() == sorted(ids[1::2])
    failed = [r for r in caplog.records if r.msg == "jobs.settle.write-failed"]
    assert failed and {r.writer.rsplit(".", 1)[-1] for r in failed} == {bad}
    assert "jobs.settle.abandoned" not in caplog.text


DELIVERY_WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = %s AND application_name LIKE 'uj:settle:%%'
   AND wait_event_type = 'Lock'
"""


def test_a_delivered_attempt_killed_while_recorded_is_recorded_once(
    committed_pg_driver,
    settings,
    declare_jobs,
    server,  # noqa: F811
):
    """The success's record waits on the delivery's row lock in the settle
    thread; its backend is killed there. The record is written again once,
    the job ends done on its first claim, and the endpoint got one POST."""
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.postgres import PostgresDriver

    settings.ULTIMATE_JOBS = LOOPBACK  # resets the driver: install one after
    driver = PostgresDriver()
    set_driver(driver)
    create_endpoint(server.url(), topics=["*"])
    (delivery,) = deliver("invoice.paid", {"invoice": 1})
    url, database = (
        database_url(connection.settings_dict),
        connection.settings_dict["NAME"],
    )
    config = WorkerConfig.from_settings(
        queues=("default",), visibility_ms=60_000, heartbeat_ms=20_000, poll_ms=50
    )
    worker = Worker(config, driver=driver)
    with (
        psycopg.connect(url) as blocker,
        psycopg.connect(url, autocommit=True) as watcher,
    ):
        blocker.execute(
            "SELECT 1 FROM ultimate_jobs_webhook_delivery WHERE id = %s FOR UPDATE",
            (delivery.pk,),
        )
        runner = start_worker_thread(worker)
        try:
            wait_until(
                lambda: watcher.execute(
                    DELIVERY_WAITING_ON_A_LOCK, (database,)
                ).fetchone()[0],
                20,
                message="the success's record never waited on the row lock",
            )
            assert len(server.received) == 1
            assert terminate_backends(url, "uj:settle:%", database=database)
            blocker.rollback()
            job_id = WebhookDelivery.objects.get(pk=delivery.pk).job_id
            wait_until(
                lambda: Job.objects.get(id=job_id).state == "done",
                20,
                message=lambda: str(_states([job_id])),
            )
        finally:
            worker.request_stop(deadline_s=5)
            runner.join(10)
    row = WebhookDelivery.objects.get(pk=delivery.pk)
    assert (row.state, row.attempts, len(row.attempt_log)) == ("delivered", 1, 1)
    assert row.delivered_at is not None and row.delivered_at <= timezone.now()
    job = Job.objects.get(id=row.job_id)
    assert (job.state, job.attempt, job.claims) == ("done", 1, 1)
    assert len(server.received) == 1


def test_a_success_written_twice_appends_once(hooks, server):  # noqa: F811
    """The record of a delivered attempt is fenced by the attempt count it
    read: written again (a retried batch), it changes nothing."""
    from django_ultimate_jobs.webhooks.rows import Success, record_successes

    endpoint, _ = create_endpoint(server.url(), topics=["*"])
    (delivery,) = deliver("t", "{}")
    now = timezone.now()
    success = Success(
        delivery=delivery.pk,
        seen=0,
        entry={"attempt": 1, "status": 200, "error": ""},
        at=now,
        endpoint=endpoint.pk,
        endpoint_change=True,
    )
    record_successes([success])
    record_successes([success])
    row = WebhookDelivery.objects.get(pk=delivery.pk)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 1, 200)
    assert row.attempt_log == [{"attempt": 1, "status": 200, "error": ""}]
    endpoint.refresh_from_db()
    assert endpoint.last_success_at == now


def test_with_a_store_outside_django_the_writes_go_first(declare_jobs):
    """The memory driver shares no transaction with Django: each writer runs
    before the acks (the jobs still read running), once per batch; a
    writer's bug is logged and left out there too."""
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.memory import MemoryDriver

    driver = MemoryDriver()
    calls = []

    def writer(items):
        calls.append((list(items), {driver.get(i).state.value for i in items}))

    def broken(items):
        raise RuntimeError("a bug in the writer")

    @declare_jobs("awm", "t.awm")()
    def writes(ctx, *, bad: bool = False):
        ctx.write_on_ack(broken if bad else writer, ctx.job_id)

    previous = set_driver(driver)
    try:
        ids = [writes.enqueue().id for _ in range(3)]
        bad = writes.enqueue(bad=True).id
        run_jobs(queues=["awm"])
        assert sorted(i for items, _ in calls for i in items) == sorted(ids)
        assert all(states == {"running"} for _, states in calls), calls
        assert {driver.get(i).state.value for i in [*ids, bad]} == {"done"}
    finally:
        set_driver(previous)


def test_an_older_claim_in_the_same_batch_writes_nothing(
    committed_pg_driver, declare_jobs
):
    """A settle kept past its lease, and the job claimed and run again since:
    both claims' acks meet in one batch. Only the newest can land, and only
    its writes are made."""
    from django_ultimate_jobs.drivers.base import AckRequest, ClaimOptions
    from django_ultimate_jobs.worker.executor import Execution

    calls = []

    def writer(items):
        calls.append(list(items))

    @declare_jobs("awc", "t.awc")()
    def writes(ctx):
        return None

    job_id = writes.enqueue().id
    driver = committed_pg_driver
    options = ClaimOptions(queues=["awc"], limit=1, worker_id="w-1", visibility_ms=1)
    (first,) = driver.claim(options).claimed
    second = wait_until(lambda: driver.claim(options).claimed, 10)[0]
    assert (first.id, first.identity.claim, second.identity.claim) == (job_id, 1, 2)
    worker = Worker(WorkerConfig.from_settings(queues=("awc",)), driver=driver)
    executions = [
        Execution(
            claimed,
            "completed",
            1,
            writes,
            ack=AckRequest(job_id=claimed.id, identity=claimed.identity),
            writes=[(writer, claimed.identity.claim)],
        )
        for claimed in (first, second)
    ]
    worker.settler.settle(executions)
    assert calls == [[2]]
    assert [e.landed for e in executions] == [False, True]
    row = Job.objects.get(id=job_id)
    assert (row.state, row.claims) == ("done", 2)
