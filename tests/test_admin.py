"""The admin over the test client: pages render, verbs are gated and logged.

The browser tests (tests/test_admin_browser.py) drive the same pages in
Chromium; these cover the refusals and the audit trail row by row.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from django_ultimate_jobs import Retry, operator
from django_ultimate_jobs.models import Job, Step
from django_ultimate_jobs.testing import run_jobs
from tests.support.dead import dead_job, press_confirmed

pytestmark = pytest.mark.postgres

LIST = "admin:ultimate_jobs_job_changelist"


@pytest.fixture
def staff(db):
    """A staff user who may look at jobs but not re-drive them."""
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    return user


def test_pages_render_for_a_superuser(admin_client, pg_driver):
    """List, filtered list, search, job page and the other pages all answer 200."""
    job_id = dead_job(pg_driver)
    listing = admin_client.get(reverse(LIST))
    assert listing.status_code == 200 and str(job_id) in listing.text
    assert str(job_id) in admin_client.get(reverse(LIST), {"state": "dead"}).text
    assert str(job_id) not in admin_client.get(reverse(LIST), {"state": "done"}).text
    for term in (str(job_id), str(job_id)[:8]):
        assert str(job_id) in admin_client.get(reverse(LIST), {"q": term}).text
    page = admin_client.get(reverse("admin:ultimate_jobs_job_change", args=[job_id]))
    assert "X_BOOM: the card was declined" in page.text
    assert "hunter2" not in page.text and "[redacted]" in page.text
    for name in ("dead_letter", "queues", "workers", "leases", "events", "dashboard"):
        response = admin_client.get(reverse(f"admin:ultimate_jobs_job_{name}"))
        assert response.status_code == 200, name


def test_retry_confirms_then_acts_and_logs(admin_client, admin_user, pg_driver):
    """GET shows a confirmation; the confirming POST requeues and logs."""
    job_id = dead_job(pg_driver)
    url = reverse("admin:ultimate_jobs_job_operate", args=[job_id, "retry"])
    assert "Yes, retry" in admin_client.get(url).text
    assert pg_driver.get(job_id).state == "dead"
    admin_client.post(url, {"confirmed": "yes"})
    assert pg_driver.get(job_id).state == "ready"
    entry = LogEntry.objects.get(object_id=str(job_id))
    assert (entry.user_id, entry.change_message) == (admin_user.pk, "Retry (admin)")


def test_a_viewer_sees_no_verbs_and_a_forged_post_is_refused(client, staff, pg_driver):
    """Without retry_job: no action, no button, and a forged POST is a 403."""
    job_id = dead_job(pg_driver)
    client.force_login(staff)
    listing = client.get(reverse(LIST))
    assert listing.status_code == 200 and "retry_selected" not in listing.text
    page = client.get(reverse("admin:ultimate_jobs_job_change", args=[job_id]))
    assert "uj-verb-retry" not in page.text
    url = reverse("admin:ultimate_jobs_job_operate", args=[job_id, "retry"])
    assert client.post(url, {"confirmed": "yes"}).status_code == 403
    forged = {"action": "retry_selected", "_selected_action": [str(job_id)]}
    client.post(reverse(LIST), {**forged, "confirmed": "yes"})
    dead = reverse("admin:ultimate_jobs_job_dead_letter")
    assert (
        client.post(dead, {"name": "tests.noop", "confirmed": "yes"}).status_code == 403
    )
    queues = reverse("admin:ultimate_jobs_job_queues")
    pause = {"queue": "default", "verb": "pause", "confirmed": "yes"}
    assert client.post(queues, pause).status_code == 403
    assert pg_driver.paused_queues() == []
    assert pg_driver.get(job_id).state == "dead"
    assert not LogEntry.objects.exists()


def test_list_action_retries_the_selected_jobs(admin_client, pg_driver):
    """The list action confirms, then retries each selected job."""
    ids = [dead_job(pg_driver) for _ in range(2)]
    chosen = {"action": "retry_selected", "_selected_action": [str(i) for i in ids]}
    confirm = admin_client.post(reverse(LIST), chosen)
    assert "Retry 2 jobs?" in confirm.text
    admin_client.post(reverse(LIST), {**chosen, "confirmed": "yes"})
    assert {pg_driver.get(i).state for i in ids} == {"ready"}
    assert LogEntry.objects.count() == 2


def test_dead_letter_groups_and_bulk_retry(admin_client, pg_driver):
    """Dead jobs group by name and error code; a group's Retry moves that group."""
    ids = [dead_job(pg_driver) for _ in range(3)]
    other = dead_job(pg_driver, error="X_TIMEOUT: the bank was slow")
    url = reverse("admin:ultimate_jobs_job_dead_letter")
    page = admin_client.get(url)
    assert "X_BOOM" in page.text and "X_TIMEOUT" in page.text
    assert "Retry these 3 jobs" in page.text
    group = {"name": "tests.noop", "code": "X_BOOM"}
    assert "3 dead jobs" in admin_client.post(url, group).text
    press_confirmed(admin_client, group)
    assert {pg_driver.get(i).state for i in ids} == {"ready"}
    assert pg_driver.get(other).state == "dead"
    assert sorted(LogEntry.objects.values_list("object_id", flat=True)) == sorted(
        str(i) for i in ids
    )


def test_a_group_of_errors_without_a_message_is_retried_whole(
    admin_client, pg_driver, declare_jobs
):
    """A bare ``RuntimeError()`` is stored as ``RuntimeError``: its group's
    Retry moves exactly it, not 0 (and not the group beside it)."""

    @declare_jobs("default", "t.admin")(retry=Retry(attempts=1))
    def bare(ctx, *, n: int = 0, message: str = ""):
        raise RuntimeError(*([message] if message else []))

    ids = [bare.enqueue(n=n).id for n in range(2)]
    other = bare.enqueue(message="boom").id
    run_jobs(queues=["default"], driver=pg_driver)
    assert {pg_driver.get(i).last_error for i in ids} == {"RuntimeError"}
    url = reverse("admin:ultimate_jobs_job_dead_letter")
    assert "Retry these 3 jobs" in admin_client.get(url).text
    group = {"name": "t.admin.bare", "code": "RuntimeError"}
    assert "3 dead jobs" in admin_client.post(url, group).text
    moved = press_confirmed(admin_client, group)
    assert "3 dead t.admin.bare RuntimeError jobs queued again" in moved.text
    assert {pg_driver.get(i).state for i in (*ids, other)} == {"ready"}


def test_a_group_retry_leaves_a_longer_code_alone(admin_client, pg_driver):
    """``RuntimeError`` and ``RuntimeErrorX`` are two groups."""
    bare = dead_job(pg_driver, error="RuntimeError")
    longer = dead_job(pg_driver, error="RuntimeErrorX")
    press_confirmed(admin_client, {"name": "tests.noop", "code": "RuntimeError"})
    assert (pg_driver.get(bare).state, pg_driver.get(longer).state) == (
        "ready",
        "dead",
    )


@pytest.mark.parametrize("param", ["queue", "name", "tenant", "state"])
def test_a_list_filter_holding_a_nul_is_an_invalid_filter_not_a_500(
    client, staff, pg_driver, param
):
    """``?queue=a%00b``: Django's answer to any invalid filter value, a
    redirect to ``?e=1`` (PostgreSQL refuses NUL in a parameter)."""
    dead_job(pg_driver)
    client.force_login(staff)
    response = client.get(reverse(LIST), {param: "a\x00b"})
    assert response.status_code == 302
    assert response["Location"] == f"{reverse(LIST)}?e=1"
    assert client.get(response["Location"]).status_code == 200


def test_a_search_holding_a_nul_is_refused_by_djangos_search_form(
    client, staff, pg_driver
):
    """Django's search field refuses NUL itself: the unsearched list, a message."""
    dead_job(pg_driver)
    client.force_login(staff)
    response = client.get(reverse(LIST), {"q": "a\x00b"})
    assert response.status_code == 200
    assert "Null characters are not allowed" in response.text


def test_every_page_answers_a_nul_with_a_refusal_not_a_500(admin_client, pg_driver):
    """Dead letters, queues, cron tasks, the job page: each POST field that
    reaches a query holds a NUL; each answers a coded message."""
    job_id = dead_job(pg_driver)
    pages = {
        "dead_letter": [
            {"name": "tests.noop\x00"},
            {"name": "tests.noop", "code": "X_BOOM\x00", "confirmed": "yes"},
        ],
        "queues": [{"queue": "default\x00", "verb": "pause", "confirmed": "yes"}],
        "cron_tasks": [{"task": "prune\x00", "verb": "pause", "confirmed": "yes"}],
    }
    for page, posts in pages.items():
        url = reverse(f"admin:ultimate_jobs_job_{page}")
        for data in posts:
            response = admin_client.post(url, data, follow=True)
            assert response.status_code == 200, (page, data)
            assert "X_" in response.text, (page, data)
    operate = reverse("admin:ultimate_jobs_job_operate", args=[job_id, "retry"])
    answer = admin_client.post(
        operate, {"from_step": "a\x00b", "confirmed": "yes"}, follow=True
    )
    assert answer.status_code == 200 and "X_STEP_NOT_FOUND" in answer.text
    assert pg_driver.get(job_id).state == "dead"
    assert pg_driver.paused_queues() == []


def test_queue_pause_and_resume(admin_client, pg_driver):
    """Pause and resume from the queues page, each confirmed."""
    url = reverse("admin:ultimate_jobs_job_queues")
    assert (
        "Yes, pause"
        in admin_client.post(url, {"queue": "default", "verb": "pause"}).text
    )
    assert pg_driver.paused_queues() == []
    admin_client.post(url, {"queue": "default", "verb": "pause", "confirmed": "yes"})
    assert [p.name for p in pg_driver.paused_queues()] == ["default"]
    admin_client.post(url, {"queue": "default", "verb": "resume", "confirmed": "yes"})
    assert pg_driver.paused_queues() == []


def test_the_queues_page_lists_the_housekeeping_queue_while_empty(
    admin_client, pg_driver
):
    """Every worker serves ultimate_jobs: the page offers it (to pause) before any row."""
    page = admin_client.get(reverse("admin:ultimate_jobs_job_queues")).text
    assert 'id="uj-queue-ultimate_jobs"' in page
    assert 'id="uj-queue-default"' in page


def test_a_large_list_never_counts_the_whole_table(admin_client, pg_driver):
    """Past 10,000 rows the count is capped and then estimated, never COUNT(*)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ultimate_jobs_job (id, name, input, run_id, state)"
            " SELECT u, 'tests.noop', '{}', u, 'done'"
            " FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, 10050)) g"
        )
        cursor.execute("ANALYZE ultimate_jobs_job")
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get(reverse(LIST), {"state": "done"})
    assert page.status_code == 200
    counts = [q["sql"] for q in captured if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 10001" in sql for sql in counts), counts
    assert page.context["cl"].result_count >= 10_001


TASKS = "admin:ultimate_jobs_job_cron_tasks"
RETENTION = "ultimate_jobs.retention"


def paused_tasks():
    return [t["name"] for t in operator.tasks() if t["paused"]]


def test_the_cron_tasks_page_lists_the_built_in_tasks(admin_client, pg_driver):
    """Both built-in tasks, with cron, zone and next run; linked from the nav."""
    page = admin_client.get(reverse(TASKS))
    assert page.status_code == 200
    rows = {row["name"]: row for row in page.context["rows"]}
    assert {RETENTION, "ultimate_jobs.partitions"} <= rows.keys()
    assert (rows[RETENTION]["cron"], rows[RETENTION]["tz"]) == ("23 * * * *", "UTC")
    assert rows[RETENTION]["next_run"] is not None
    assert "17 3 * * *" in page.text and "not armed yet" in page.text
    listing = admin_client.get(reverse(LIST))
    assert f'href="{reverse(TASKS)}"' in listing.text


def test_task_pause_and_resume_confirm_act_and_log(admin_client, admin_user, pg_driver):
    """Pause, then resume, a task from the page: each confirmed, each logged."""
    url = reverse(TASKS)
    pause = {"task": RETENTION, "verb": "pause"}
    assert "Yes, pause" in admin_client.post(url, pause).text
    assert paused_tasks() == []
    admin_client.post(url, {**pause, "confirmed": "yes"})
    assert paused_tasks() == [RETENTION]
    assert "paused since" in admin_client.get(url).text
    admin_client.post(url, {"task": RETENTION, "verb": "resume", "confirmed": "yes"})
    assert paused_tasks() == []
    assert pg_driver.paused_queues() == []
    messages = list(
        LogEntry.objects.order_by("pk").values_list("object_id", "change_message")
    )
    assert messages == [
        (RETENTION, f"Paused cron task {RETENTION} (admin)"),
        (RETENTION, f"Resumed cron task {RETENTION} (admin)"),
    ]
    assert {e.user_id for e in LogEntry.objects.all()} == {admin_user.pk}


def test_task_run_now_enqueues_its_job(admin_client, pg_driver):
    """Run now confirms, then queues the task's job once; a second is deduped."""
    url = reverse(TASKS)
    run = {"task": RETENTION, "verb": "run"}
    assert "Yes, run now" in admin_client.post(url, run).text
    assert not Job.objects.exists()
    done = admin_client.post(url, {**run, "confirmed": "yes"}, follow=True)
    assert f"Cron task {RETENTION}: 1 job queued." in done.text
    (entry,) = LogEntry.objects.all()
    job = pg_driver.get(UUID(entry.object_id))
    assert (job.name, job.enqueued_by) == (RETENTION, f"task:{RETENTION}")
    again = admin_client.post(url, {**run, "confirmed": "yes"}, follow=True)
    assert "0 jobs queued; 1 already queued" in again.text
    assert LogEntry.objects.count() == 1
    (listed,) = [t for t in operator.tasks() if t["name"] == RETENTION]
    assert (listed["armed"], listed["last_occurrence"]) == (False, None)


def test_an_unknown_task_is_refused_with_its_code(admin_client, pg_driver):
    """A task no code declares: the coded error, nothing written or logged."""
    url = reverse(TASKS)
    forged = {"task": "tests.cron.typo", "verb": "pause", "confirmed": "yes"}
    page = admin_client.post(url, forged, follow=True)
    assert "X_TASK_UNKNOWN" in page.text
    assert pg_driver.cron.paused_tasks() == [] and not LogEntry.objects.exists()


def test_a_viewer_sees_no_task_buttons_and_a_forged_post_is_refused(
    client, staff, pg_driver
):
    """Without change_queuepause or promote_job: no buttons, forged POSTs 403."""
    client.force_login(staff)
    url = reverse(TASKS)
    page = client.get(url)
    assert page.status_code == 200 and RETENTION in page.text
    for button in ("uj-pause", "uj-resume", "uj-run-now"):
        assert f'class="{button}"' not in page.text
    for verb in ("pause", "resume", "run", "bogus"):
        forged = {"task": RETENTION, "verb": verb, "confirmed": "yes"}
        assert client.post(url, forged).status_code == 403, verb
    assert paused_tasks() == []
    assert not Job.objects.exists()
    assert not LogEntry.objects.exists()


def test_run_now_needs_promote_job_not_change_queuepause(client, staff, pg_driver):
    """A user who may pause queues and tasks may not run a task off schedule."""
    staff.user_permissions.add(Permission.objects.get(codename="change_queuepause"))
    client.force_login(staff)
    url = reverse(TASKS)
    page = client.get(url)
    assert 'class="uj-pause"' in page.text
    assert 'class="uj-run-now"' not in page.text
    run = {"task": RETENTION, "verb": "run", "confirmed": "yes"}
    assert client.post(url, run).status_code == 403
    assert not Job.objects.exists()
    client.post(url, {"task": RETENTION, "verb": "pause", "confirmed": "yes"})
    assert paused_tasks() == [RETENTION]


# -- the list's query string: only its own filters --------------------------------

# Each pair: a right guess and a wrong one at a value the job page redacts
# or a wide column, and regex patterns PostgreSQL refuses.
ORACLES = [
    ("input__password__startswith", "h", "x"),
    ("input__password", "hunter2", "hunter3"),
    ("input__password__regex", "^h", "("),
    ("input__password__contains", "unter", "zzz"),
    ("last_error__regex", "BOOM", "(a"),
    ("last_error_stack__icontains", "line 1", "zzz"),
    ("result__isnull", "True", "False"),
    ("history__isnull", "True", "False"),
    ("progress__isnull", "True", "False"),
    ("idempotency_key__startswith", "", "zzz"),
    ("id__startswith", "0", "f"),
    ("state__in", "dead", "done"),
    ("queue__regex", "def", "("),
    ("created_at__gte", "2000-01-01", "2999-01-01"),
    ("foo", "1", "2"),
]


@pytest.mark.parametrize(("lookup", "right", "wrong"), ORACLES)
def test_a_viewer_cannot_filter_on_any_other_lookup(
    client, staff, pg_driver, lookup, right, wrong
):
    """``?input__password__startswith=h`` would answer whether the redacted
    password starts with h: every lookup outside the list's own filters is
    refused the same way (Django's 400 for a disallowed lookup) whatever
    the guess, and a bad regex never reaches PostgreSQL."""
    job_id = dead_job(pg_driver)
    client.force_login(staff)
    answers = [client.get(reverse(LIST), {lookup: guess}) for guess in (right, wrong)]
    assert [a.status_code for a in answers] == [400, 400]
    assert answers[0].content == answers[1].content
    assert str(job_id) not in answers[0].text
    with_a_filter = client.get(reverse(LIST), {"state": "dead", lookup: right})
    assert with_a_filter.status_code == 400


def test_a_search_never_looks_inside_the_input(client, staff, pg_driver):
    """``?q=`` matches an id, an id prefix or an idempotency key, never input."""
    job_id = dead_job(pg_driver)
    client.force_login(staff)
    for term in ("hunter2", "password", "X_BOOM"):
        page = client.get(reverse(LIST), {"q": term})
        assert page.status_code == 200 and str(job_id) not in page.text, term


@pytest.mark.parametrize("state", ["bogus", "DEAD", "dead "])
def test_an_unknown_state_is_an_invalid_filter(client, staff, pg_driver, state):
    """No job holds ``?state=bogus``: a redirect to ``?e=1``, as the docs say."""
    dead_job(pg_driver)
    client.force_login(staff)
    response = client.get(reverse(LIST), {"state": state})
    assert response.status_code == 302
    assert response["Location"] == f"{reverse(LIST)}?e=1"
    landing = client.get(response["Location"])
    assert landing.status_code == 200 and 'id="uj-invalid-filter"' in landing.text
    assert 'id="uj-invalid-filter"' not in client.get(reverse(LIST)).text


def test_every_filter_the_pages_link_to_still_works(client, staff, pg_driver):
    """The sidebar's filters, the links of the dead-letter, queues, dashboard
    and job pages, search, ordering and paging all answer as before."""
    job_id = dead_job(pg_driver)
    Job.objects.filter(id=job_id).update(tenant_id="acme")
    client.force_login(staff)

    def listed(params):
        page = client.get(reverse(LIST), params)
        assert page.status_code == 200, params
        return str(job_id) in page.text

    for params in (
        {"state": "dead"},
        {"queue": "default"},
        {"name": "tests.noop"},
        {"tenant": "acme"},
        {"state": "dead", "name": "tests.noop"},
        {"q": str(job_id)[:8]},
        {"o": "-1", "p": "1"},
        {"all": "", "e": "1"},
        {"_facets": "1"},
        {"state": ""},
    ):
        assert listed(params), params
    for params in ({"state": "done"}, {"queue": "billing"}, {"tenant": "other"}):
        assert not listed(params), params
    for choice in ("?state=dead", "?queue=default", "?name=tests.noop"):
        assert choice in client.get(reverse(LIST)).text


@pytest.mark.parametrize(
    "page", ["dead_letter", "queues", "cron_tasks", "workers", "dashboard"]
)
def test_the_other_pages_read_no_query_string(client, staff, pg_driver, page):
    """Their GET takes no parameter: a lookup in the query string changes
    nothing on the page and never reaches a query."""
    dead_job(pg_driver)
    client.force_login(staff)
    url = reverse(f"admin:ultimate_jobs_job_{page}")
    plain = client.get(url)
    probed = client.get(
        url,
        {
            "input__password__startswith": "h",
            "last_error__regex": "(a",
            "name": "zzz",
            "code": "X_BOOM",
            "state": "bogus",
        },
    )
    assert (plain.status_code, probed.status_code) == (200, 200)
    for key in ("groups", "rows", "workers", "windows"):
        if key in plain.context:
            assert plain.context[key] == probed.context[key], key


def test_every_admin_of_the_app_refuses_lookups_outside_its_filters(rf, staff):
    """Any ModelAdmin of the app (today the jobs one) takes no lookup on a
    column from the query string but its filters' own parameters."""
    from django.contrib import admin

    request = rf.get("/")
    request.user = staff
    registered = [
        model_admin
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label == "ultimate_jobs"
    ]
    assert registered
    for model_admin in registered:
        for field in model_admin.model._meta.concrete_fields:
            for lookup in ("regex", "startswith", "gte"):
                probe = f"{field.name}__{lookup}"
                assert not model_admin.lookup_allowed(probe, "(", request), probe


def test_a_staff_user_without_rights_gets_403_on_the_job_page(client, pg_driver):
    """The job page answers 403 like every other page of the app, not 404
    (which would tell a job id from a typo only by its absence)."""
    job_id = dead_job(pg_driver)
    user = User.objects.create_user("norights", password="pw", is_staff=True)
    client.force_login(user)
    page = reverse("admin:ultimate_jobs_job_change", args=[job_id])
    assert client.get(page).status_code == 403
    assert client.get(reverse(LIST)).status_code == 403


def test_a_step_status_this_version_does_not_know_is_shown_not_404(
    admin_client, pg_driver
):
    """A step row a newer version wrote (status 'done'): the job page shows
    the coded error, as `jobs show` does, instead of a 404."""
    job_id = dead_job(pg_driver)
    run_id = Job.objects.get(id=job_id).run_id
    Step.objects.create(
        run_id=run_id, name="charge", status="done", started_at=timezone.now()
    )
    page = admin_client.get(reverse("admin:ultimate_jobs_job_change", args=[job_id]))
    assert page.status_code == 200
    assert "X_JOB_ROW_STATUS_UNKNOWN" in page.text
    assert "&#x27;done&#x27;" in page.text or "'done'" in page.text


def test_retry_from_a_step_the_run_never_recorded_is_refused_before_confirming(
    admin_client, pg_driver
):
    """``?from_step=`` naming no recorded step: the refusal (with the run's
    steps), not a confirmation that would refuse after the press; a step the
    run recorded is confirmed and retried from."""
    job_id = dead_job(pg_driver)
    run_id = Job.objects.get(id=job_id).run_id
    Step.objects.create(
        run_id=run_id, name="charge", status="completed", started_at=timezone.now()
    )
    url = reverse("admin:ultimate_jobs_job_operate", args=[job_id, "retry"])

    refused = admin_client.get(url, {"from_step": "nope"}, follow=True)

    assert "Yes, retry" not in refused.text
    assert "X_STEP_NOT_FOUND" in refused.text and "&#x27;charge&#x27;" in refused.text
    assert refused.redirect_chain[-1][0] == reverse(
        "admin:ultimate_jobs_job_change", args=[job_id]
    )
    assert pg_driver.get(job_id).state == "dead"
    long = admin_client.get(url, {"from_step": "x" * 5000}, follow=True).text
    assert "X_STEP_NOT_FOUND" in long and "x" * 100 not in long
    assert (
        "Yes, retry from step charge"
        in admin_client.get(url, {"from_step": "charge"}).text
    )
    admin_client.post(url, {"from_step": "charge", "confirmed": "yes"})
    assert pg_driver.get(job_id).state == "ready"
    assert not Step.objects.filter(run_id=run_id, name="charge").exists()
