"""The humane admin in headless Chromium (issue 26), on a live server.

An operator reads a job that failed, was retried from the admin and then
succeeded: its times in words, its attempts numbered across the retry with
the retry in the history, the old error as history, its progress as a bar.
The jobs list fits a 1280 px window; the dead-letter button says "Retry
this job"; the events page lists what was published and the wait that
took it. The fixtures and the browser are tests/test_admin_browser.py's;
with ``ULTIMATE_JOBS_SCREENSHOTS=1`` the pages are saved under docs/images/.
"""

from __future__ import annotations

import re

import pytest

from django_ultimate_jobs import Retry, job, operator, publish_event
from django_ultimate_jobs.testing import run_jobs
from tests import test_admin_browser as shop
from tests.test_admin_browser import checkout, dead_checkout, declines

# The browser tier's fixtures: one Chromium, an operator logged in.
browser = shop.browser
admin = shop.admin

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RAW_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
mirror = {"up": False}


@job(name="shop.sync_catalogue", retry=Retry(attempts=1))
def sync_catalogue(ctx, *, parts: int):
    """Copy the catalogue in parts to the mirror: fails while it is down."""
    ctx.step.run("list-parts", lambda: {"parts": parts})
    ctx.progress(parts - 1, parts, note=f"copying part {parts - 1} of {parts}")
    if not mirror["up"]:
        raise RuntimeError("the mirror refused the connection")
    return {"copied": parts}


@job(name="accounts.send_welcome_email", retry=Retry(attempts=1))
def send_welcome_email(ctx, *, user_id: int):
    """A realistic, long job name for the list's width (issue 26 review)."""
    raise RuntimeError(f"X_SMTP_REFUSED: the mail server refused user {user_id}")


@job(name="shop.ship_order")
def ship_order(ctx, *, order: int):
    """Ship once the order's payment event arrives."""
    paid = ctx.step.wait_for_event("await-payment", "shop.paid", key=str(order))
    return {"shipped": order, "by": paid["by"]}


def test_a_retried_job_that_succeeded_reads_as_its_story(admin):
    """#1 failed, Retried, #2 succeeded; the old error under History; the
    progress bar with its note; every time in words, the ISO on hover."""
    mirror["up"] = False
    enqueued = sync_catalogue.enqueue(parts=4)
    run_jobs(queues=["default"])
    page = f"/admin/ultimate_jobs/job/{enqueued.id}/change/"
    admin.open(page)
    assert "the mirror refused" in admin.text("#uj-last-error")
    admin.click("#uj-verb-retry")
    admin.confirm()
    mirror["up"] = True
    run_jobs(queues=["default"])
    admin.open(page)
    assert admin.text("#uj-job-state") == "done"
    rows = [row.text for row in admin.all("#uj-attempts tbody tr")]
    assert [row.split()[0] for row in rows] == ["1", "Retried", "2"], rows
    assert "Attempt failed" in rows[0] and "Attempt succeeded" in rows[2]
    assert admin.all("#uj-last-error") == []
    earlier = admin.find("#uj-earlier-error").get_attribute("textContent")
    assert "the mirror refused the connection" in earlier
    bar = admin.find("#uj-progress progress")
    assert bar.get_attribute("value") == "75"
    assert admin.text("#uj-progress-note") == "copying part 3 of 4"
    for cell in ("#uj-run-at", "#uj-created-at", "#uj-updated-at"):
        shown = admin.text(cell)
        assert re.search(r"\d+ (seconds?|minutes?) ago", shown), shown
        assert not RAW_ISO.search(shown), shown
        title = admin.find(f"{cell} time").get_attribute("title")
        assert RAW_ISO.search(title), title
    assert "2 attempts in all, across 1 retry" in admin.text("#uj-attempt-count")
    admin.browser.execute_script(
        "document.querySelector('#uj-progress').scrollIntoView()"
    )
    admin.shot("admin-job-history")


def test_the_retry_schedule_reads_in_seconds(admin):
    """A fresh checkout (3 attempts, 1 s doubling): "1 s, then 2 s"."""
    delayed = checkout.using(delay="1h").enqueue(order=5001, card_token="tok")
    admin.open(f"/admin/ultimate_jobs/job/{delayed.id}/change/")
    assert admin.text("#uj-retry-schedule") == "1 s, then 2 s"
    assert admin.text("#uj-run-at").endswith("(in 59 minutes)") or "in 1 hour" in (
        admin.text("#uj-run-at")
    )


def test_the_jobs_list_fits_1280_px_without_a_horizontal_scrollbar(admin):
    """Last error, run at and updated are on screen at 1280 px beside
    Django's open sidebar, with a realistic long job name; a long error
    and a long name are cut, whole on hover."""
    declines["card"] = True
    dead_checkout(6001)
    send_welcome_email.enqueue(user_id=6004)
    run_jobs(queues=["default"])
    for order in (6002, 6003):
        checkout.using(delay="1h").enqueue(order=order, card_token="tok")
    browser = admin.browser
    size = browser.get_window_size()
    browser.set_window_size(1280, 900)
    try:
        admin.open("/admin/ultimate_jobs/job/")
        overflow = browser.execute_script(
            """
            const results = document.querySelector('#changelist .results');
            return [results.scrollWidth - results.clientWidth,
                    document.documentElement.scrollWidth - window.innerWidth];
            """
        )
        widths = browser.execute_script(
            """
            return [document.querySelector('#changelist .results').clientWidth,
                    document.querySelector('#changelist-filter') &&
                      document.querySelector('#changelist-filter').getBoundingClientRect().width,
                    ...Array.from(document.querySelectorAll('#result_list thead th'))
                      .map(th => th.className + ':' + Math.round(th.getBoundingClientRect().width))];
            """
        )
        assert overflow[0] <= 0 and overflow[1] <= 0, (overflow, widths)
        for column in ("error_summary", "run_at_shown", "updated_at_shown"):
            right = browser.execute_script(
                "return document.querySelector(arguments[0])"
                ".getBoundingClientRect().right",
                f"th.column-{column}",
            )
            assert right <= browser.execute_script("return window.innerWidth"), column
        errors = [
            cut.get_attribute("title")
            for cut in admin.all("#result_list td.field-error_summary .uj-cut")
        ]
        assert any(title.startswith("X_CARD_DECLINED") for title in errors), errors
        names = [
            cut.get_attribute("title")
            for cut in admin.all("#result_list td.field-name_shown .uj-cut")
        ]
        assert "accounts.send_welcome_email" in names, names
        admin.shot("admin-jobs-list-1280")
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_the_dead_letter_button_counts_in_words(admin):
    """One dead checkout: "Retry this job", never "Retry these 1"."""
    dead_checkout(7001)
    admin.open("/admin/ultimate_jobs/job/dead-letter/")
    button = "button.uj-retry-group[data-code='X_CARD_DECLINED']"
    assert admin.text(button) == "Retry this job"


def test_the_events_page_shows_what_was_published_and_who_took_it(admin):
    """From the nav: the event, its key, its payload redacted, the wait."""
    shipped = ship_order.enqueue(order=8001)
    run_jobs(queues=["default"])  # parks on the wait
    publish_event("shop.paid", {"by": "card", "card_token": "tok_live_42"}, key="8001")
    run_jobs(queues=["default"])
    assert operator.show(shipped.id)["state"] == "done"
    admin.open("/admin/ultimate_jobs/job/")
    admin.click("nav.uj-nav a[href$='/events/']")
    row = "#uj-events tbody tr"
    assert admin.text(f"{row} td:nth-child(1)") == "shop.paid"
    assert admin.text(f"{row} td:nth-child(2)") == "8001"
    assert admin.text(f"{row} .uj-matched") == "await-payment"
    admin.find(f"{row} details summary").click()
    payload = admin.text(f"{row} .uj-event-payload")
    assert "[redacted]" in payload and "tok_live_42" not in payload
    assert "ago" in admin.text(f"{row} td:nth-child(4)")
    admin.shot("admin-events")
    admin.click(f"{row} .uj-matched a")
    assert admin.text("#uj-job-state") == "done"
