"""The admin says times, counts, retries, progress and events as a person reads them.

Django test-client checks of issue 26's "humane admin" (the browser tier,
tests/test_admin_humane_browser.py, checks the same on a live server):
times in the project's time zone with "3 minutes ago" beside them, retry
schedules as "1 s, then 2 s", plural forms, attempts numbered across
retries with the retry in the history, a succeeded job's old error shown
as history, ``ctx.progress`` as a bar, and the read-only events page.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import formats

from django_ultimate_jobs import Retry, job, operator, publish_event
from django_ultimate_jobs.admin.humane import (
    counted,
    humane_ms,
    humane_time,
    relative,
    retry_schedule,
    short_relative,
)
from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.base import ClaimOptions, NackRequest, WorkerRecord
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.testing import run_jobs
from tests.support.dead import dead_job

pytestmark = pytest.mark.postgres

PAGE = "admin:ultimate_jobs_job_change"
EVENTS = "admin:ultimate_jobs_job_events"
ISO_UTC = "+00:00<"  # a raw ISO time printed as a cell's text
RELATIVE = re.compile(r"\d+ (seconds?|minutes?|s|min) ago|in \d+ (minutes?|min)")
failing = {"on": True}


@job(name="t.humane.flaky", retry=Retry(attempts=1))
def flaky(ctx, *, n: int):
    """Fails while ``failing["on"]``; reports progress, then succeeds."""
    ctx.progress(3, 4, note="copying part 3 of 4")
    if failing["on"]:
        raise RuntimeError(f"the mirror refused part {n}")
    return {"n": n}


@job(name="t.humane.backoff", retry=Retry(attempts=3, delay="1s"))
def backoff(ctx):
    """A job whose retry policy waits 1 s, then 2 s."""


@job(name="t.humane.waiter")
def waiter(ctx, *, order: int):
    """Waits for the payment of ``order``."""
    return ctx.step.wait_for_event("await-payment", "t.humane.paid", key=str(order))


@pytest.fixture
def recent(db):
    """The Postgres driver on a clock three minutes behind the real one."""
    driver = PostgresDriver(clock=ManualClock(datetime.now(UTC) - timedelta(minutes=3)))
    previous = set_driver(driver)
    failing["on"] = True
    yield driver
    set_driver(previous)


# -- the helpers ---------------------------------------------------------------


def test_durations_schedules_and_counts_read_as_words():
    """Milliseconds in the largest units, a schedule with "then", plurals."""
    assert [humane_ms(ms) for ms in (250, 1000, 1500, 150_000, 3_900_000)] == [
        "250 ms",
        "1 s",
        "1.5 s",
        "2 min 30 s",
        "1 h 5 min",
    ]
    assert retry_schedule([1000, 2000]) == "1 s, then 2 s"
    assert retry_schedule([]) == "none"
    assert [counted(n, "job") for n in (0, 1, 3)] == ["0 jobs", "1 job", "3 jobs"]
    assert counted(1, "retry", "retries") == "1 retry"
    now = datetime(2026, 12, 2, 9, 14, 43, tzinfo=UTC)
    assert relative(now - timedelta(minutes=3), now) == "3 minutes ago"
    assert relative(now - timedelta(seconds=12), now) == "12 seconds ago"
    assert relative(now + timedelta(hours=2), now) == "in 2 hours"
    assert short_relative(now - timedelta(seconds=200), now) == "3 min ago"
    assert short_relative(now + timedelta(minutes=59, seconds=50), now) == "in 59 min"
    assert short_relative(now - timedelta(days=3, hours=2), now) == "3 d ago"


def test_a_time_is_shown_in_the_project_time_zone_with_the_iso_on_hover(settings):
    """``TIME_ZONE`` and ``DATETIME_FORMAT``; the exact instant in the markup."""
    settings.TIME_ZONE = "Europe/Paris"
    moment = "2026-12-02T09:14:43.172299+00:00"
    shown = str(humane_time(moment))
    local = datetime.fromisoformat(moment).astimezone(ZoneInfo("Europe/Paris"))
    assert formats.date_format(local, "DATETIME_FORMAT") in shown
    assert "10:14" in shown and "ago)" in shown
    assert f'datetime="{moment}"' in shown
    assert humane_time(None) == "" and humane_time("not a time") == "not a time"


# -- the pages -----------------------------------------------------------------


def test_the_job_workers_and_leases_pages_show_no_raw_iso_time(admin_client, recent):
    """Every time on the three pages reads "3 minutes ago" (or "in 57
    minutes") beside its date, and the jobs list says it alone."""
    job_id = dead_job(recent)
    now = recent.clock.now()
    recent.announce_worker(
        WorkerRecord(
            id="w-humane",
            host="box",
            pid=7,
            queues=["default"],
            concurrency=4,
            in_flight=[],
            started_at=now,
            heartbeat_at=now,
            expires_at=now + timedelta(hours=1),
        ),
        ttl_ms=3_600_000,
    )
    recent.leases.acquire("lock:humane", 1, 3_600_000, "box:7:w")
    for url in (
        reverse(PAGE, args=[job_id]),
        reverse("admin:ultimate_jobs_job_workers"),
        reverse("admin:ultimate_jobs_job_leases"),
    ):
        text = admin_client.get(url).text
        assert ISO_UTC not in text, url
        assert RELATIVE.search(text), re.findall(r"<time.*?</time>.{0,40}", text)
    listing = admin_client.get(reverse("admin:ultimate_jobs_job_changelist")).text
    assert RELATIVE.search(listing) and ISO_UTC not in listing


def test_the_retry_schedule_reads_in_seconds(admin_client, recent):
    """ "Retries left" of a fresh job with delay 1s, doubling: "1 s, then 2 s";
    of a dead one, what a retry would start again with (docs/howto/admin.md)."""
    enqueued = backoff.enqueue()
    (claimed,) = recent.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert claimed.id == enqueued.id
    recent.nack(
        NackRequest(
            job_id=claimed.id, identity=claimed.identity, dead_letter=True, error="X"
        )
    )
    page = admin_client.get(reverse(PAGE, args=[enqueued.id])).text
    assert '<dd id="uj-retry-schedule">1 s, then 2 s (when retried)</dd>' in page
    assert "none: the job is dead" not in page
    enqueued = backoff.enqueue()
    page = admin_client.get(reverse(PAGE, args=[enqueued.id])).text
    assert '<dd id="uj-retry-schedule">1 s, then 2 s</dd>' in page
    assert "1000 ms" not in page


def test_attempts_are_numbered_across_a_retry_from_the_admin(admin_client, recent):
    """#1 failed, the retry (with its time), #2 succeeded: never #1 again.

    The earlier error is history, not the job's "Last error".
    """
    enqueued = flaky.enqueue(n=1)
    run_jobs(queues=["default"], driver=recent)
    assert operator.show(enqueued.id)["state"] == "dead"
    url = reverse(PAGE, args=[enqueued.id])
    assert 'id="uj-last-error"' in admin_client.get(url).text
    operate = reverse("admin:ultimate_jobs_job_operate", args=[enqueued.id, "retry"])
    admin_client.post(operate, {"confirmed": "yes"})
    failing["on"] = False
    run_jobs(queues=["default"], driver=recent)
    page = admin_client.get(url)
    rows = page.context["attempts"]
    assert [(r["kind"], r.get("number")) for r in rows] == [
        ("attempt", 1),
        ("retry", None),
        ("attempt", 2),
    ]
    assert rows[1]["at"] is not None
    text = page.text
    assert text.count('class="uj-attempt-row"') == 2
    assert "Retried" in text and "Attempt succeeded" in text
    assert 'id="uj-last-error"' not in text
    assert 'id="uj-earlier-error"' in text and "the mirror refused part 1" in text
    assert "2 attempts in all, across 1 retry" in text
    assert '<dd id="uj-retry-schedule">none: the job is done</dd>' in text


def test_a_done_jobs_old_error_is_not_its_last_error_in_lists(admin_client, recent):
    """A job that failed, then succeeded after a retry: the jobs list and
    ``jobs ls`` show no error for it (the job page shows it as history)."""
    enqueued = flaky.enqueue(n=7)
    run_jobs(queues=["default"], driver=recent)
    operator.retry(enqueued.id)
    failing["on"] = False
    run_jobs(queues=["default"], driver=recent)
    shown = operator.show(enqueued.id)
    assert shown["state"] == "done" and "refused part 7" in shown["last_error"]
    listing = admin_client.get(reverse("admin:ultimate_jobs_job_changelist")).text
    assert str(enqueued.id)[:13] in listing
    assert "refused part 7" not in listing
    out = StringIO()
    call_command("jobs", "ls", stdout=out)
    (line,) = [row for row in out.getvalue().splitlines() if str(enqueued.id) in row]
    assert "done" in line and "refused" not in line
    dead = flaky.enqueue(n=8)
    failing["on"] = True
    run_jobs(queues=["default"], driver=recent)
    listing = admin_client.get(reverse("admin:ultimate_jobs_job_changelist")).text
    assert "refused part 8" in listing
    out = StringIO()
    call_command("jobs", "ls", stdout=out)
    (line,) = [row for row in out.getvalue().splitlines() if str(dead.id) in row]
    assert "refused part 8" in line


def test_progress_is_a_bar_with_its_note(admin_client, recent):
    """``ctx.progress(3, 4, note=...)``: a bar at 75 %, the note, no raw JSON first."""
    failing["on"] = False
    enqueued = flaky.enqueue(n=2)
    run_jobs(queues=["default"], driver=recent)
    page = admin_client.get(reverse(PAGE, args=[enqueued.id])).text
    assert '<progress max="100" value="75.0">' in page
    assert "3 of 4 (75.0 %)" in page
    assert (
        '<span class="uj-progress-note" id="uj-progress-note">copying part 3 of 4'
        in page
    )


def test_the_dead_letter_buttons_say_their_count_in_words(admin_client, recent):
    """One dead job: "Retry this job"; three: "Retry these 3 jobs"."""
    dead_job(recent, error="X_ONE: alone")
    for _ in range(3):
        dead_job(recent, error="X_MANY: crowd")
    page = admin_client.get(reverse("admin:ultimate_jobs_job_dead_letter")).text
    assert "Retry this job" in page and "Retry these 3 jobs" in page
    assert "Retry these 1" not in page


def test_the_events_page_lists_events_with_the_waits_that_took_them(
    admin_client, committed_pg_driver
):
    """Name, key, payload redacted, times, and the wait that took the event.

    Committed rows on the database clock: a wait owns the events committed
    after it began.
    """
    taken = waiter.enqueue(order=7)
    run_jobs(queues=["default"])  # parks on the wait
    publish_event("t.humane.paid", {"by": "ada", "card_token": "tok_live_9"}, key="7")
    publish_event("t.humane.refunded", {"by": "bob"}, key="8")
    run_jobs(queues=["default"])
    assert operator.show(taken.id)["state"] == "done"
    listed = operator.events(name="t.humane.paid")
    assert [e["matched"] for e in listed] == [
        [{"run_id": str(taken.run_id), "step": "await-payment"}]
    ]
    page = admin_client.get(reverse(EVENTS))
    text = page.text
    assert "t.humane.paid" in text and "t.humane.refunded" in text
    assert "tok_live_9" not in text and "[redacted]" in text
    assert f'href="{reverse(PAGE, args=[taken.run_id])}"' in text
    assert ISO_UTC not in text
    narrowed = admin_client.get(reverse(EVENTS), {"name": "t.humane.refunded"}).text
    assert "t.humane.refunded" in narrowed and "await-payment" not in narrowed
    refused = admin_client.get(reverse(EVENTS), {"name": "a\x00b"})
    assert refused.status_code == 200 and "X_JOB_PAGE_INVALID" in refused.text
    nav = admin_client.get(reverse("admin:ultimate_jobs_job_changelist")).text
    assert f'href="{reverse(EVENTS)}"' in nav


def test_the_events_page_needs_view_job(recent):
    """Staff without ``view_job`` get a 403; with it, the page."""
    user = User.objects.create_user("events-staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(reverse(EVENTS)).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    user = User.objects.get(pk=user.pk)
    client.force_login(user)
    assert client.get(reverse(EVENTS)).status_code == 200


def test_operator_events_refuses_a_bad_limit_before_any_statement(recent):
    """A limit outside 1..200 is ``X_JOB_PAGE_INVALID``."""
    from django_ultimate_jobs.errors import JobPageInvalid

    for limit in (0, 201, True, "5"):
        with pytest.raises(JobPageInvalid):
            operator.events(limit=limit)  # type: ignore[arg-type]
