"""The admin in headless Chromium against a live server and real PostgreSQL.

The acceptance of the operator surface: an operator logs in, finds a dead
job, reads its error and steps, retries it, and a worker finishes it; a
delayed job is cancelled; a queue and a cron task are paused and resumed;
the dead letters are retried in bulk; a staff user without ``retry_job`` is
offered no retry and a forged POST changes nothing.

Selenium drives Debian's ``chromium`` through ``chromium-driver`` (``./dev
test`` installs both, or says how). Without them these tests FAIL: they are
the acceptance.
With ``ULTIMATE_JOBS_SCREENSHOTS=1`` they save the PNGs under docs/images/.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User

from django_ultimate_jobs import Retry, job, operator
from django_ultimate_jobs.errors import JobsError, RetryClass
from django_ultimate_jobs.testing import run_jobs
from tests.support.example import Demo, scratch_database

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BROWSER_DIR = Path(os.environ.get("ULTIMATE_JOBS_BROWSER_DIR") or "/usr/bin")
CHROMIUM = BROWSER_DIR / "chromium"
CHROMEDRIVER = BROWSER_DIR / "chromedriver"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "images"
PASSWORD = "browser-pw"
WAIT_S = 10
declines = {"card": True}


class CardDeclined(JobsError):
    """The payment provider refused the card (the browser tests' error)."""

    code = "X_CARD_DECLINED"
    retry_class = RetryClass.TERMINAL
    default_fix = "ask the customer for another card, then retry the job"


@job(name="shop.checkout", retry=Retry(attempts=3, delay="1s"))
def checkout(ctx, *, order: int, card_token: str):
    """Reserve stock, then charge: the charge fails while cards are declined."""
    ctx.step.run("reserve-stock", lambda: {"order": order, "reserved": True})

    def charge():
        if declines["card"]:
            raise CardDeclined(f"card ending 4242 declined for order {order}")
        return {"charged": order}

    return ctx.step.run("charge-card", charge)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (each test logs in afresh)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"the admin browser tests need {', '.join(missing)}: "
            "apt-get install -y chromium chromium-driver (./dev test does this)",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(
        service=Service(executable_path=str(CHROMEDRIVER)), options=options
    )
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def _detached(element):
    """A wait condition: ``element``'s page has been replaced.

    Selenium's ``staleness_of`` only knows StaleElementReferenceException;
    mid-navigation Chromium may instead answer "Node with given id does not
    belong to the document", which is the same fact.
    """
    from selenium.common.exceptions import WebDriverException

    def detached(_driver):
        try:
            element.is_enabled()
        except WebDriverException:
            return True
        return False

    return detached


class Admin:
    """The browser pointed at a server's admin (and shop), with small verbs."""

    def __init__(self, browser, base):
        self.browser = browser
        self.base = base

    def open(self, path):
        self.browser.get(self.base + path)

    def find(self, css):
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.browser, WAIT_S).until(
            ec.presence_of_element_located(("css selector", css))
        )

    def all(self, css):
        return self.browser.find_elements("css selector", css)

    def click(self, css):
        """Click and wait for the next page to replace this one."""
        from selenium.webdriver.support.ui import WebDriverWait

        element = self.find(css)
        element.click()
        WebDriverWait(self.browser, WAIT_S).until(_detached(element))

    def confirm(self):
        self.click("#uj-confirm")

    def login(self, username):
        self.browser.delete_all_cookies()
        self.open("/admin/login/")
        self.find("#id_username").send_keys(username)
        self.find("#id_password").send_keys(PASSWORD)
        self.click("input[type=submit]")
        assert (
            "Log out" in self.browser.page_source
            or "logout" in self.browser.page_source
        )

    def text(self, css="body"):
        return self.find(css).text

    def wait_for_text(self, css, expected, *, timeout=WAIT_S, reload=False):
        """Wait until the text of ``css`` is ``expected``, as a worker moves on.

        The page may be replaced meanwhile (the shop's order page reloads
        itself every 2 s); ``reload`` refreshes pages that do not.
        """
        from selenium.common.exceptions import TimeoutException, WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        seen = []

        def shows(driver):
            try:
                if reload:
                    driver.refresh()
                seen[:] = [driver.find_element("css selector", css).text]
            except WebDriverException:
                return False
            return seen[0] == expected

        try:
            WebDriverWait(self.browser, timeout, poll_frequency=0.5).until(shows)
        except TimeoutException:
            raise AssertionError(
                f"{css} never showed {expected!r} in {timeout} s (last: {seen})"
            ) from None

    def shot(self, name):
        if os.environ.get("ULTIMATE_JOBS_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            self.browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


@pytest.fixture
def admin(browser, live_server):
    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    declines["card"] = True
    page = Admin(browser, live_server.url)
    page.login("operator")
    return page


@pytest.fixture
def demo(tmp_path):
    """``./dev demo`` on a scratch database: its worker and server, stopped after."""
    with scratch_database() as url:
        running = Demo(url, tmp_path, username="operator", password=PASSWORD)
        try:
            yield running
        finally:
            running.stop()
            print(running.logs())  # shown when the test failed


DEMO_WAIT_S = 60  # three attempts, their backoff and the worker's idle polls


def test_the_demo_payment_outage_from_dead_letter_to_paid(browser, demo):
    """The tutorial's "break it on purpose", on ./dev demo's shop and worker.

    The payment provider is taken down from the shop, an order's charge is
    dead-lettered by the real worker, found in Dead letters, read on its
    page; the provider is brought back, the job retried from the admin, and
    the worker finishes it: the order is paid.
    """
    page = Admin(browser, demo.base)
    page.open("/")
    page.click("#provider-switch")
    assert page.text("#provider-state") == "down"
    from selenium.webdriver.support.ui import Select

    Select(page.find("#id_product")).select_by_visible_text("Coffee mug")
    page.find("#id_email").send_keys("visitor@example.com")
    page.click("form[action$='/checkout/'] button")
    order_page = page.browser.current_url
    charge = "tr[data-job='shop.charge_payment']"
    page.wait_for_text(f"{charge} .state", "dead", timeout=DEMO_WAIT_S)
    assert "did not answer" in page.text(f"{charge} .error")
    assert page.text("#order-status") == "Reserved"
    job_path = page.find(f"{charge} a").get_attribute("href").removeprefix(demo.base)
    assert page.all("#dead-hint")

    page.login("operator")
    page.open("/admin/ultimate_jobs/job/dead-letter/")
    assert "X_PAYMENT_PROVIDER_DOWN" in page.text("#uj-dead-groups")
    page.click(f"a[href$='{job_path}']")
    assert "payment provider did not answer" in page.text("#uj-last-error")

    page.open("/")
    page.click("#provider-switch")
    assert page.text("#provider-state") == "up"

    page.open(job_path)
    page.click("#uj-verb-retry")
    page.confirm()
    page.wait_for_text("#uj-job-state", "done", timeout=DEMO_WAIT_S, reload=True)
    page.browser.get(order_page)
    page.wait_for_text("#order-status", "Paid", timeout=DEMO_WAIT_S)
    assert page.text(f"{charge} .state") == "done"


def dead_checkout(order):
    enqueued = checkout.enqueue(order=order, card_token="tok_secret")
    run_jobs(queues=["default"])
    assert operator.show(enqueued.id)["state"] == "dead"
    return str(enqueued.id)


def test_find_a_dead_job_see_why_retry_it_and_a_worker_finishes_it(admin):
    """Dead letters -> job page (error, steps) -> retry -> run_jobs() -> done."""
    declines["card"] = False
    for order in (998, 999, 1000):
        checkout.enqueue(order=order, card_token="tok")
    run_jobs(queues=["default"])
    declines["card"] = True
    job_id = dead_checkout(1001)
    for order in (1002, 1003):
        checkout.using(delay="1h").enqueue(order=order, card_token="tok")
    admin.open("/admin/ultimate_jobs/job/")
    assert admin.all(f"#result_list a[href$='/{job_id}/change/']")
    admin.shot("admin-jobs-list")
    admin.open("/admin/ultimate_jobs/job/dead-letter/")
    assert "X_CARD_DECLINED" in admin.text("#uj-dead-groups")
    admin.shot("admin-dead-letters")
    admin.click(f"a[href$='/{job_id}/change/']")
    assert "card ending 4242 declined" in admin.text("#uj-last-error")
    steps = admin.text("#uj-steps")
    assert "reserve-stock" in steps and "charge-card" in steps
    assert "tok_secret" not in admin.text("#uj-input")
    admin.shot("admin-job-page")
    admin.click("#uj-verb-retry")
    admin.confirm()
    assert admin.text("#uj-job-state") == "ready"
    declines["card"] = False
    (execution,) = run_jobs(queues=["default"])
    assert execution.outcome == "completed"
    admin.browser.refresh()
    assert admin.text("#uj-job-state") == "done"


def test_cancel_a_delayed_job(admin):
    """The Cancel button on a delayed job's page cancels it after confirming."""
    delayed = checkout.using(delay="1h").enqueue(order=2001, card_token="tok")
    admin.open(f"/admin/ultimate_jobs/job/{delayed.id}/change/")
    assert admin.text("#uj-job-state") == "delayed"
    admin.click("#uj-verb-cancel")
    admin.confirm()
    assert admin.text("#uj-job-state") == "cancelled"
    assert operator.show(delayed.id)["state"] == "cancelled"


def test_pause_and_resume_a_queue(admin):
    """Pause then resume the default queue from the queues page."""
    admin.open("/admin/ultimate_jobs/job/queues/")
    admin.click("#uj-queue-default .uj-pause")
    admin.confirm()
    assert "paused since" in admin.text("#uj-queue-default")
    assert [p["name"] for p in operator.stats()["paused"]] == ["default"]
    admin.click("#uj-queue-default .uj-resume")
    admin.confirm()
    assert admin.text("#uj-queue-default .uj-paused") == "no"
    assert operator.stats()["paused"] == []


def test_bulk_retry_from_the_dead_letter_view(admin):
    """Retry all dead checkouts at once; a worker then finishes every one."""
    ids = [dead_checkout(order) for order in (3001, 3002, 3003)]
    admin.open("/admin/ultimate_jobs/job/dead-letter/")
    admin.click("button.uj-retry-group[data-code='X_CARD_DECLINED']")
    admin.confirm()
    moved = "3 dead shop.checkout X_CARD_DECLINED jobs queued again; 0 remaining"
    assert moved in admin.text()
    assert admin.text("#uj-no-dead") == "No dead jobs."
    declines["card"] = False
    assert len(run_jobs(queues=["default"])) == 3
    assert {operator.show(i)["state"] for i in ids} == {"done"}


def test_a_viewer_gets_no_retry_and_a_forged_post_changes_nothing(admin):
    """Without retry_job: no retry action or button; a forged POST is a 403."""
    job_id = dead_checkout(4001)
    viewer = User.objects.create_user("viewer", password=PASSWORD, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    admin.login("viewer")
    admin.open("/admin/ultimate_jobs/job/")
    assert admin.all(f"#result_list a[href$='/{job_id}/change/']")
    assert admin.all("select[name=action] option[value=retry_selected]") == []
    admin.open(f"/admin/ultimate_jobs/job/{job_id}/change/")
    assert admin.all("#uj-verb-retry") == []
    status = admin.browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const body = new FormData();
        body.append("confirmed", "yes");
        fetch(arguments[0], {method: "POST", body, credentials: "same-origin"})
          .then(r => done(r.status));
        """,
        f"/admin/ultimate_jobs/job/{job_id}/operate/retry/",
    )
    assert status == 403
    assert operator.show(job_id)["state"] == "dead"


def test_pause_and_resume_a_cron_task(admin):
    """Pause then resume the built-in retention task from the cron tasks page."""
    retention = "tr[data-task='ultimate_jobs.retention']"
    fire_retention_once()
    admin.open("/admin/ultimate_jobs/job/")
    admin.click("nav.uj-nav a[href$='/cron-tasks/']")
    assert admin.text(f"{retention} .uj-last-fire") != "never"
    admin.click(f"{retention} .uj-pause")
    admin.confirm()
    assert "paused since" in admin.text(f"{retention} .uj-paused")
    assert [t["name"] for t in operator.tasks() if t["paused"]] == [
        "ultimate_jobs.retention"
    ]
    admin.shot("admin-cron-tasks")
    admin.click(f"{retention} .uj-resume")
    admin.confirm()
    assert admin.text(f"{retention} .uj-paused") == "no"
    assert not any(t["paused"] for t in operator.tasks())


def fire_retention_once():
    """Arm the built-in tasks 90 minutes ago, then catch up to now.

    Retention (minute 23, run-once) fires one occurrence, so the page has a
    last fire to show; partitions (03:17) is only armed, most of the day.
    """
    from datetime import UTC, datetime, timedelta

    from django_ultimate_jobs.drivers.postgres import PostgresDriver
    from django_ultimate_jobs.testing import ManualClock, run_scheduler

    now = datetime.now(UTC)
    clock = ManualClock(now - timedelta(minutes=90))
    driver = PostgresDriver(clock=clock)
    assert run_scheduler(driver=driver) == []
    clock.set(now)
    fired = run_scheduler(driver=driver)
    assert "ultimate_jobs.retention" in [f.task for f in fired]


@job(name="shop.receipt", retry=Retry(attempts=1, dead_letter=False))
def receipt(ctx, *, order: int):
    """Mail a receipt: best effort, a failure is dropped (no dead letter)."""
    raise RuntimeError(f"the mail server refused the receipt of order {order}")


def _settle_half_an_hour(clock, driver):
    """Checkouts settled over 30 minutes of a frozen clock: each round a few
    done (picked up 1 to 3 s after enqueue), every fifth round one dead,
    every seventh a receipt failed. Answers the counts (done, failed, dead)."""
    done = failed = dead = 0
    for round_ in range(15):
        clock.advance(minutes=2)
        declines["card"] = False
        for order in range(round_ % 4 + 1):
            checkout.enqueue(order=round_ * 10 + order, card_token="tok")
            done += 1
        if round_ % 7 == 3:
            receipt.enqueue(order=round_ * 10)
            failed += 1
        clock.advance(seconds=round_ % 3 + 1)
        run_jobs(queues=["default"], driver=driver)
        if round_ % 5 == 4:
            declines["card"] = True
            checkout.enqueue(order=round_ * 10 + 9, card_token="tok")
            dead += 1
            run_jobs(queues=["default"], driver=driver)
    return {"done": done, "failed": failed, "dead": dead}


def test_dashboard_charts_show_the_counts_in_both_themes(admin):
    """The dashboard's charts show what a worker settled, per minute: the
    bars' values add up to the counts, the bars are drawn, and the admin's
    dark theme recolours them (the admin's own CSS variables)."""
    from django_ultimate_jobs.clock import ManualClock
    from django_ultimate_jobs.drivers import set_driver
    from django_ultimate_jobs.drivers.postgres import PostgresDriver

    clock = ManualClock(datetime(2030, 1, 1, 11, 58, tzinfo=UTC))
    driver = PostgresDriver(clock=clock)
    previous = set_driver(driver)
    try:
        settled = _settle_half_an_hour(clock, driver)
        admin.open("/admin/ultimate_jobs/job/dashboard/")
        charts = admin.find("#uj-charts")
        for key, expected in settled.items():
            assert charts.get_attribute(f"data-{key}") == str(expected)
            bars = admin.all(f"#uj-chart-{key} rect")
            assert len(bars) == 60
            assert sum(int(b.get_attribute("data-value")) for b in bars) == expected
            assert all(
                b.size["height"] > 0
                for b in bars
                if b.get_attribute("data-value") != "0"
            )
        light = _fill(admin, "#uj-chart-done rect")
        admin.shot("admin-dashboard")
        admin.browser.execute_script("localStorage.setItem('theme', 'dark')")
        admin.browser.refresh()
        admin.find("#uj-charts")
        assert (
            admin.browser.execute_script(
                "return document.documentElement.dataset.theme"
            )
            == "dark"
        )
        # Django's dark --link-fg (#81d4fa) and --error-fg (#e35f5f).
        assert _fill(admin, "#uj-chart-done rect") == "rgb(129, 212, 250)" != light
        assert _fill(admin, "#uj-chart-dead rect") == "rgb(227, 95, 95)"
        admin.shot("admin-dashboard-dark")
    finally:
        admin.browser.execute_script("localStorage.removeItem('theme')")
        set_driver(previous)


def _fill(admin, css):
    return admin.browser.execute_script(
        "return getComputedStyle(document.querySelector(arguments[0])).fill", css
    )
