"""The admin over the test client: pages render, verbs are gated and logged.

The browser tests (tests/test_admin_browser.py) drive the same pages in
Chromium; these cover the refusals and the audit trail row by row.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_ultimate_jobs.drivers.base import ClaimOptions, NackRequest
from tests.jobsapp.jobs import noop

pytestmark = pytest.mark.postgres

LIST = "admin:ultimate_jobs_job_changelist"


def dead_job(driver, error="X_BOOM: the card was declined"):
    enqueued = noop.enqueue(n=1, password="hunter2")
    (claimed,) = driver.claim(
        ClaimOptions(queues=["default"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert driver.nack(
        NackRequest(
            job_id=claimed.id,
            identity=claimed.identity,
            dead_letter=True,
            error=error,
            stack="Traceback: line 1",
        )
    )
    return enqueued.id


@pytest.fixture
def staff(db):
    """A staff user who may look at jobs but not re-drive them."""
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    return user


def test_pages_render_for_a_superuser(admin_client, pg_driver):
    """List, filtered list, search, job page and the four pages all answer 200."""
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
    for name in ("dead_letter", "queues", "workers", "dashboard"):
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
    assert "Retry 2 job(s)?" in confirm.text
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
    assert "Retry these 3" in page.text
    group = {"name": "tests.noop", "code": "X_BOOM"}
    assert "3 dead job(s)" in admin_client.post(url, group).text
    admin_client.post(url, {**group, "confirmed": "yes"})
    assert {pg_driver.get(i).state for i in ids} == {"ready"}
    assert pg_driver.get(other).state == "dead"
    assert LogEntry.objects.get().change_message == (
        "Retried 3 dead tests.noop X_BOOM job(s) (admin)"
    )


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
