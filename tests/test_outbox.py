"""The transactional outbox on one database: routing, relay passes, TestCase.

The two-database project, the fault points and the relay processes are in
tests/acceptance/test_outbox.py; these pin what a single-database user
(``.using(outbox=True)``, ``OUTBOX`` on) relies on, against the real tables.
"""

from __future__ import annotations

import json
import logging
from importlib.util import find_spec
from io import StringIO
from uuid import UUID

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import override_settings

from django_ultimate_jobs.errors import (
    JobInputInvalid,
    JobsTablesMissing,
    OutboxNoTransaction,
    SettingsInvalid,
)
from django_ultimate_jobs.maintenance.retention import sweep_target
from django_ultimate_jobs.models import Job, OutboxMessage
from django_ultimate_jobs.outbox.relay import OutboxRelay, install_local_relay
from django_ultimate_jobs.testing import publish_outbox, run_jobs
from tests.jobsapp.jobs import noop
from tests.support.backends import backends, terminate_backends
from tests.support.waiting import wait_until
from tests.support.workers import database_url

ON = {"QUEUES": ["default"], "OUTBOX": True}
REQUIRED = {"QUEUES": ["default"], "OUTBOX": "required"}


@pytest.fixture
def relay(committed_pg_driver):
    """This process's relay thread for the test, stopped after it."""
    relay = OutboxRelay()
    previous = install_local_relay(relay)
    yield relay
    relay.stop()
    install_local_relay(previous)


def published(message_id) -> bool:
    return OutboxMessage.objects.filter(
        id=message_id, published_at__isnull=False
    ).exists()


# -- commit, rollback, savepoints (the relay thread, committed rows) -------------


@override_settings(ULTIMATE_JOBS=ON)
def test_a_commit_publishes_the_staged_job_under_the_answered_id(relay):
    with transaction.atomic():
        answer = noop.enqueue(n=1)
        assert OutboxMessage.objects.filter(id=answer.id).exists()
        assert not Job.objects.filter(id=answer.id).exists()
    wait_until(lambda: published(answer.id), 10, message="the relay published")
    job = Job.objects.get(id=answer.id)
    assert (job.name, job.input, job.run_id) == ("tests.noop", {"n": 1}, answer.run_id)
    assert relay.published == 1


@override_settings(ULTIMATE_JOBS=ON)
def test_a_rollback_leaves_no_message_and_no_job(relay):
    with pytest.raises(RuntimeError), transaction.atomic():
        answer = noop.enqueue(n=1)
        raise RuntimeError("business write failed")
    # A later commit proves the relay ran after the rollback.
    with transaction.atomic():
        later = noop.enqueue(n=2)
    wait_until(lambda: published(later.id), 10)
    assert not OutboxMessage.objects.filter(id=answer.id).exists()
    assert not Job.objects.filter(id=answer.id).exists()


@override_settings(ULTIMATE_JOBS=ON)
def test_a_savepoint_rollback_drops_only_its_own_messages(relay):
    with transaction.atomic():
        before = noop.enqueue(n=1)
        with pytest.raises(RuntimeError), transaction.atomic():
            inner = noop.enqueue(n=2)
            raise RuntimeError("inner failed")
        after = noop.enqueue(n=3)
    wait_until(lambda: published(before.id) and published(after.id), 10)
    assert set(Job.objects.values_list("id", flat=True)) == {before.id, after.id}
    assert not OutboxMessage.objects.filter(id=inner.id).exists()


def test_using_outbox_true_routes_through_the_outbox_with_one_database(relay):
    with transaction.atomic():
        staged = noop.using(outbox=True).enqueue(n=1)
        direct = noop.enqueue(n=2)
        assert Job.objects.filter(id=direct.id).exists()
        assert not Job.objects.filter(id=staged.id).exists()
    wait_until(lambda: published(staged.id), 10)
    assert not OutboxMessage.objects.filter(id=direct.id).exists()


@override_settings(ULTIMATE_JOBS=ON)
def test_enqueue_many_stages_in_order_and_publishes_in_one_pass(relay):
    with transaction.atomic():
        answers = noop.enqueue_many([{"n": i} for i in range(50)])
    wait_until(lambda: Job.objects.count() == 50, 10)
    rows = list(OutboxMessage.objects.order_by("staged_at", "id"))
    assert [r.id for r in rows] == [a.id for a in answers]
    assert {j.input["n"] for j in Job.objects.all()} == set(range(50))


@override_settings(ULTIMATE_JOBS=ON)
def test_the_relay_thread_survives_its_backend_terminated(relay):
    relay.idle_close_s = 60.0  # keep the connection to kill it
    with transaction.atomic():
        first = noop.enqueue(n=1)
    wait_until(lambda: published(first.id), 10)
    url = database_url(connection.settings_dict)
    killed = terminate_backends(
        url, "uj:relay:%", database=connection.settings_dict["NAME"]
    )
    assert killed
    with transaction.atomic():
        second = noop.enqueue(n=2)
    wait_until(lambda: published(second.id), 15, message="published after the kill")
    assert Job.objects.filter(id__in=[first.id, second.id]).count() == 2


# -- OUTBOX = "required" --------------------------------------------------------


@override_settings(ULTIMATE_JOBS=REQUIRED)
def test_required_refuses_an_enqueue_outside_a_transaction(committed_pg_driver):
    for attempt in (
        lambda: noop.enqueue(n=1),
        lambda: noop.enqueue_many([{"n": 1}]),
        lambda: noop.using(outbox=False).enqueue(n=1),
    ):
        with pytest.raises(OutboxNoTransaction) as refused:
            attempt()
        assert refused.value.code == "X_OUTBOX_NO_TX"
    assert not Job.objects.exists()
    assert not OutboxMessage.objects.exists()


@override_settings(ULTIMATE_JOBS=REQUIRED)
def test_required_stages_inside_a_transaction(db):
    answer = noop.enqueue(n=1)  # pytest-django's test transaction
    assert OutboxMessage.objects.filter(id=answer.id).exists()


def test_on_conflict_error_is_refused_through_the_outbox(db):
    with pytest.raises(JobInputInvalid):
        noop.using(outbox=True, on_conflict="error").enqueue(n=1)
    assert not OutboxMessage.objects.exists()


# -- relay passes ----------------------------------------------------------------


def test_a_republish_after_a_lost_mark_meets_the_job_it_made(pg_driver):
    answer = noop.using(outbox=True).enqueue(n=1)
    assert publish_outbox() == 1
    # As if the relay died after publishing, before marking, and its lease lapsed.
    OutboxMessage.objects.update(published_at=None, claimed_at=None, claimed_by=None)
    assert publish_outbox() == 1
    assert Job.objects.filter(id=answer.id).count() == 1
    assert Job.objects.count() == 1
    assert published(answer.id)


def test_a_batch_stops_at_its_first_failure_and_releases_the_rest(pg_driver):
    answers = noop.using(outbox=True).enqueue_many([{"n": i} for i in range(3)])
    # The jobs table refuses this priority (its check constraint).
    OutboxMessage.objects.filter(id=answers[1].id).update(priority=500)
    assert publish_outbox() == 1
    assert list(Job.objects.values_list("id", flat=True)) == [answers[0].id]
    poisoned = OutboxMessage.objects.get(id=answers[1].id)
    assert poisoned.attempts == 1 and "uj_job_priority_range" in poisoned.last_error
    assert poisoned.claimed_by is None and poisoned.published_at is None
    held = OutboxMessage.objects.get(id=answers[2].id)
    assert (held.claimed_by, held.published_at) == (None, None)
    OutboxMessage.objects.filter(id=answers[1].id).update(priority=0)
    assert publish_outbox() == 2
    assert Job.objects.count() == 3


def test_a_live_claim_is_not_taken_by_a_second_relay(pg_driver):
    noop.using(outbox=True).enqueue(n=1)
    first, second = OutboxRelay(), OutboxRelay()
    assert len(first.store.claim(first.token, limit=10, lease_ms=30_000)) == 1
    assert second.store.claim(second.token, limit=10, lease_ms=30_000) == []
    # A lapsed lease is taken again.
    assert len(second.store.claim(second.token, limit=10, lease_ms=0)) == 1
    # The lapsed claimant can no longer retire the message.
    assert (
        first.store.mark_published([OutboxMessage.objects.get().id], first.token) == 0
    )


def test_the_relay_roles_idle_sweep_backs_off_to_outbox_sweep_max(pg_driver):
    """An idle relay role sweeps 200 ms doubling to OUTBOX_SWEEP_MAX (30 s) and
    no further; a pass that publishes starts over at the floor."""
    relay = OutboxRelay(poll=True)
    waits = [relay._cycle() for _ in range(10)]
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30])
    noop.using(outbox=True).enqueue(n=1)
    assert relay._cycle() == pytest.approx(0.2)
    assert relay.published == 1


@override_settings(ULTIMATE_JOBS={**ON, "OUTBOX_SWEEP_MAX": "1s"})
def test_outbox_sweep_max_sets_the_relay_roles_ceiling(pg_driver):
    relay = OutboxRelay(poll=True)
    assert [relay._cycle() for _ in range(6)] == pytest.approx([0.2, 0.4, 0.8, 1, 1, 1])


@override_settings(ULTIMATE_JOBS={**ON, "OUTBOX_SWEEP_MAX": "1h"})
def test_a_failed_publish_is_retried_within_idle_poll_max_not_the_sweep_max(
    pg_driver,
):
    bad = noop.using(outbox=True).enqueue(n=1)
    OutboxMessage.objects.filter(id=bad.id).update(priority=500)
    relay = OutboxRelay(poll=True)
    assert [relay._cycle() for _ in range(7)] == pytest.approx(
        [0.2, 0.4, 0.8, 1.6, 2, 2, 2]
    )
    assert relay.published == 0
    OutboxMessage.objects.filter(id=bad.id).update(priority=0)
    assert relay._cycle() == pytest.approx(0.2)
    assert relay.published == 1


# -- Django TestCase: nothing commits ------------------------------------------


@override_settings(ULTIMATE_JOBS=ON)
def test_capture_on_commit_callbacks_publishes_in_the_test_transaction(
    pg_driver, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            answer = noop.enqueue(n=1)
    assert Job.objects.filter(id=answer.id).exists()
    assert published(answer.id)


@override_settings(ULTIMATE_JOBS=ON)
def test_run_jobs_publishes_staged_messages_first(pg_driver):
    with transaction.atomic():
        answer = noop.enqueue(n=1)
    executions = run_jobs()
    assert [e.claimed.id for e in executions] == [answer.id]


# -- the system check, retention ----------------------------------------------


def test_the_check_names_the_outbox_when_jobs_live_in_another_database():
    with override_settings(ULTIMATE_JOBS={"DATABASE": "jobs"}):
        errors = [m for m in checks.run_checks() if m.id == "ultimate_jobs.E004"]
        assert errors and "OUTBOX" in errors[0].hint
    with override_settings(ULTIMATE_JOBS={"DATABASE": "jobs", "OUTBOX": True}):
        assert not [m for m in checks.run_checks() if m.id == "ultimate_jobs.E004"]
    assert not [m for m in checks.run_checks() if m.id == "ultimate_jobs.E004"]


def test_retention_sweeps_published_messages_only(pg_driver, clock):
    kept = noop.using(outbox=True).enqueue(n=1)
    gone = noop.using(outbox=True).enqueue(n=2)
    publish_outbox()
    OutboxMessage.objects.filter(id=kept.id).update(published_at=None)
    from datetime import timedelta

    from django.utils import timezone

    later = timezone.now() + timedelta(days=2)
    assert sweep_target("outbox", later) == {"outbox": 1}
    assert list(OutboxMessage.objects.values_list("id", flat=True)) == [kept.id]
    assert not OutboxMessage.objects.filter(id=gone.id).exists()


def test_the_admin_lists_messages_read_only_with_their_status(admin_client, pg_driver):
    ok, bad = noop.using(outbox=True).enqueue_many([{"n": 1}, {"n": 2}])
    OutboxMessage.objects.filter(id=bad.id).update(priority=500)
    publish_outbox()
    url = "/admin/ultimate_jobs/outboxmessage/"
    page = admin_client.get(url).content.decode()
    assert str(ok.id) in page and str(bad.id) in page
    assert "uj_job_priority_range" in page
    failed = admin_client.get(url + "?status=failed").content.decode()
    assert str(bad.id) in failed and str(ok.id) not in failed
    assert admin_client.get(url + "add/").status_code == 403


@pytest.mark.skipif(
    not (find_spec("django.tasks") or find_spec("django_tasks")),
    reason="neither django.tasks nor the django-tasks backport is installed",
)
@override_settings(ULTIMATE_JOBS=REQUIRED)
def test_the_tasks_backend_stages_through_the_outbox(relay):
    from tests.tasksapp import tasks

    with pytest.raises(OutboxNoTransaction):
        tasks.add.enqueue(2, 3)
    with transaction.atomic():
        result = tasks.add.enqueue(2, 3)
        assert OutboxMessage.objects.filter(id=result.id).exists()
        assert not Job.objects.exists()
    wait_until(lambda: published(UUID(result.id)), 10)
    (execution,) = run_jobs(queues=["default"])
    assert execution.claimed.id == UUID(result.id)
    assert tasks.add.get_result(result.id).return_value == 5


@override_settings(ULTIMATE_JOBS=ON)
def test_an_idle_relay_thread_lets_its_connections_go_and_wakes_again(relay):
    with transaction.atomic():
        first = noop.enqueue(n=1)
    wait_until(lambda: published(first.id), 10)
    url = database_url(connection.settings_dict)
    name = connection.settings_dict["NAME"]
    wait_until(lambda: not backends(url, "uj:relay:%", database=name), 10)
    with transaction.atomic():
        second = noop.enqueue(n=2)
    wait_until(lambda: published(second.id), 10)


# -- review fixes: what a user met from the docs ---------------------------------


@override_settings(ULTIMATE_JOBS=REQUIRED)
def test_required_says_which_case_refused_the_enqueue(db):
    # pytest-django's test transaction: a transaction is open here.
    with pytest.raises(OutboxNoTransaction) as passed:
        noop.using(outbox=False).enqueue(n=1)
    assert "using(outbox=False) was passed" in passed.value.cause
    assert "OUTBOX'] = True" in passed.value.fix
    assert "outbox=False) for a" not in passed.value.fix  # no direct enqueue promised
    assert not OutboxMessage.objects.exists() and not Job.objects.exists()


@override_settings(ULTIMATE_JOBS=REQUIRED)
def test_required_outside_a_transaction_names_the_database(committed_pg_driver):
    with pytest.raises(OutboxNoTransaction) as refused:
        noop.enqueue(n=1)
    assert "no transaction is open on 'default'" in refused.value.cause


BAD_ALIAS = {"QUEUES": ["default"], "OUTBOX": True, "OUTBOX_DATABASE": "nope"}


def test_a_bad_outbox_sweep_max_fails_the_check():
    def e001(value) -> list[str]:
        with override_settings(ULTIMATE_JOBS={"OUTBOX_SWEEP_MAX": value}):
            return [m.msg for m in checks.run_checks() if m.id == "ultimate_jobs.E001"]

    (refused,) = e001("soon")
    assert "['OUTBOX_SWEEP_MAX'] 'soon' is not a duration" in refused
    assert e001("45s") == []


def test_an_unknown_outbox_database_fails_the_check_and_every_use(db):
    with override_settings(ULTIMATE_JOBS=BAD_ALIAS):
        (error,) = [m for m in checks.run_checks() if m.id == "ultimate_jobs.E005"]
        assert "'nope'" in error.msg and "OUTBOX_DATABASE" in error.hint
        with pytest.raises(SettingsInvalid) as refused:
            noop.enqueue(n=1)
        assert refused.value.code == "X_SETTINGS_INVALID"
        assert "'nope'" in refused.value.cause
        with pytest.raises(CommandError, match="X_SETTINGS_INVALID"):
            call_command("runjobs", "--relay-only", "--burst")
    assert not [m for m in checks.run_checks() if m.id == "ultimate_jobs.E005"]


def test_a_missing_outbox_table_is_coded_at_enqueue(pg_driver):
    with pytest.raises(JobsTablesMissing) as missing, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE ultimate_jobs_outbox")
        noop.using(outbox=True).enqueue(n=1)
    assert missing.value.code == "X_JOBS_TABLES_MISSING"
    assert "ultimate_jobs_outbox" in missing.value.cause
    assert "migrate ultimate_jobs" in missing.value.fix


@override_settings(ULTIMATE_JOBS={**ON, "IDLE_POLL_MAX": "100ms"})
def test_a_relay_without_its_table_logs_once_and_recovers(committed_pg_driver, caplog):
    caplog.set_level(logging.DEBUG, logger="django_ultimate_jobs")
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ultimate_jobs_outbox RENAME TO uj_outbox_away")
    relay = OutboxRelay(poll=True)
    previous = install_local_relay(relay)
    try:
        relay.start()
        wait_until(lambda: relay.passes >= 4, 15, message="the relay kept passing")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE uj_outbox_away RENAME TO ultimate_jobs_outbox")
    try:
        failed = [
            r
            for r in caplog.records
            if r.getMessage() == "jobs.outbox.tick-failed"
            and r.levelno >= logging.ERROR
        ]
        assert len(failed) == 1, failed
        assert failed[0].code == "X_JOBS_TABLES_MISSING"
        assert failed[0].exc_info is None  # a coded error: no traceback
        with transaction.atomic():
            answer = noop.enqueue(n=1)
        wait_until(lambda: published(answer.id), 15, message="published after")
        assert relay.published == 1
        assert any(
            r.getMessage() == "jobs.outbox.tick-recovered" for r in caplog.records
        )
    finally:
        relay.stop()
        install_local_relay(previous)


@pytest.mark.parametrize(
    "extra",
    [
        ["--no-relay"],
        ["--queues", "default"],
        ["--concurrency", "4"],
        ["--processes", "2"],
        ["--max-jobs-per-process", "5"],
    ],
)
def test_relay_only_refuses_options_it_would_ignore(db, extra):
    with pytest.raises(CommandError, match="X_SETTINGS_INVALID"):
        call_command("runjobs", "--relay-only", *extra)


def test_relay_only_burst_publishes_what_is_pending_and_exits(pg_driver):
    answers = noop.using(outbox=True).enqueue_many([{"n": i} for i in range(3)])
    out = StringIO()
    call_command("runjobs", "--relay-only", "--burst", stdout=out)
    assert "published 3 outbox messages" in out.getvalue()
    assert set(Job.objects.values_list("id", flat=True)) == {a.id for a in answers}
    assert not OutboxMessage.objects.filter(published_at=None).exists()


def test_a_finishing_relay_hands_its_claims_back(pg_driver):
    answer = noop.using(outbox=True).enqueue(n=1)
    relay = OutboxRelay()
    assert len(relay.store.claim(relay.token, limit=10, lease_ms=30_000)) == 1
    relay.finish(0.1)
    message = OutboxMessage.objects.get(id=answer.id)
    assert (message.claimed_by, message.claimed_at) == (None, None)
    assert relay.stopped
    # The next relay takes it now, not after the claim lease.
    assert publish_outbox() == 1


def test_jobs_outbox_lists_and_discards_a_message_that_cannot_publish(
    pg_driver, admin_client
):
    bad, held = noop.using(outbox=True).enqueue_many([{"n": 1}, {"n": 2}])
    OutboxMessage.objects.filter(id=bad.id).update(priority=500)
    assert publish_outbox() == 0  # the poisoned message holds the other one
    out = StringIO()
    call_command("jobs", "outbox", "--json", stdout=out)
    listed = json.loads(out.getvalue())
    assert listed["pending"] == 2
    first = listed["messages"][0]
    assert first["id"] == str(bad.id) and first["status"] == "failed"
    assert "uj_job_priority_range" in first["last_error"]
    out = StringIO()
    call_command("jobs", "outbox-discard", str(bad.id), "--unredacted", stdout=out)
    assert f"discarded {bad.id}" in out.getvalue()
    assert publish_outbox() == 1
    assert list(Job.objects.values_list("id", flat=True)) == [held.id]
    with pytest.raises(CommandError, match="X_JOB_NOT_FOUND"):
        call_command(
            "jobs", "outbox-discard", str(held.id), "--unredacted"
        )  # published
    with pytest.raises(CommandError, match="X_JOB_INPUT_INVALID"):
        call_command("jobs", "outbox-discard", "not-a-uuid", "--unredacted")


def test_the_admin_shows_a_lapsed_claim(admin_client, pg_driver):
    from datetime import timedelta

    from django.utils import timezone

    answer = noop.using(outbox=True).enqueue(n=1)
    OutboxMessage.objects.filter(id=answer.id).update(
        claimed_by="relay:gone", claimed_at=timezone.now() - timedelta(minutes=5)
    )
    page = admin_client.get("/admin/ultimate_jobs/outboxmessage/").content.decode()
    assert "claim lapsed" in page


def test_an_input_direct_enqueue_takes_goes_through_the_outbox_unchanged(pg_driver):
    big = "x" * 3_000_000  # no library limit on the direct path: none here either
    answer = noop.using(outbox=True).enqueue(n=1, note=big)
    assert publish_outbox() == 1
    assert Job.objects.get(id=answer.id).input == {"n": 1, "note": big}
