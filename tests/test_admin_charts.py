"""The dashboard's charts over the test client: the counts jobs settled.

Real jobs run by ``run_jobs()`` on the Postgres driver with a frozen clock
settle known outcomes with a known pickup latency; the dashboard's inline
SVG (parsed as XML: it must be well-formed) and its table show exactly
those counts, per queue and per job name, per minute and per hour. The
browser test (tests/test_admin_browser.py) looks at the same page in
Chromium, in the light and dark themes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.urls import reverse

from django_ultimate_jobs import Retry
from django_ultimate_jobs.testing import run_jobs

pytestmark = pytest.mark.postgres

DASHBOARD = "admin:ultimate_jobs_job_dashboard"
SVG = "{http://www.w3.org/2000/svg}"


def charts(html: str) -> dict[str, dict[str, int]]:
    """Each chart's bars: ``{chart: {slot start: value}}``, non-zero only."""
    found = {}
    for key, svg in re.findall(
        r'<figure class="uj-chart" id="uj-chart-(\w+)".*?(<svg .*?</svg>)', html, re.S
    ):
        root = ET.fromstring(svg)
        assert root.find(f"{SVG}title").text and root.find(f"{SVG}desc").text
        found[key] = {
            rect.get("data-start"): int(rect.get("data-value"))
            for rect in root.iter(f"{SVG}rect")
            if rect.get("data-value") != "0"
        }
    return found


def counts(**given: int) -> dict[str, int]:
    """The container's totals: ``given``, every other one 0."""
    return {
        k: given.get(k, 0) for k in ("done", "retried", "failed", "dead", "pickups")
    }


def totals(html: str) -> dict[str, int]:
    """The data attributes of the charts' container."""
    (attributes,) = re.findall(r'<div class="uj-charts" id="uj-charts"([^>]*)>', html)
    return {k: int(v) for k, v in re.findall(r'data-(\w+)="(\d+)"', attributes)}


@pytest.fixture
def settled(pg_driver, clock, declare_jobs):
    """3 done on queue charts-a, then 1 dead and 1 failed on charts-b a
    minute later; each picked up 2 s (then 4 s) after it fell due."""
    on_a = declare_jobs("charts-a", "charts")
    on_b = declare_jobs("charts-b", "charts")

    @on_a()
    def ok(ctx):
        return None

    @on_b(retry=Retry(attempts=1))
    def broken(ctx):
        raise RuntimeError("broken for good")

    @on_b(retry=Retry(attempts=1, dead_letter=False))
    def dropped(ctx):
        raise RuntimeError("dropped for good")

    for _ in range(3):
        ok.enqueue()
    clock.advance(seconds=2)
    assert len(run_jobs(driver=pg_driver, queues=["charts-a"])) == 3
    first = clock.now().replace(second=0)
    clock.advance(minutes=1)
    broken.enqueue()
    dropped.enqueue()
    clock.advance(seconds=4)
    assert len(run_jobs(driver=pg_driver, queues=["charts-b"])) == 2
    return first, first + timedelta(minutes=1)


def test_charts_show_what_the_worker_settled(admin_client, settled):
    """Per minute: 3 done in the first minute, 1 dead and 1 failed in the
    next; the pickup means are 2 s and 4 s; the table says the same."""
    first, second = (minute.isoformat() for minute in settled)
    page = admin_client.get(reverse(DASHBOARD)).text
    assert totals(page) == counts(done=3, failed=1, dead=1, pickups=5)
    assert charts(page) == {
        "done": {first: 3},
        "failed": {second: 1},
        "dead": {second: 1},
        "pickup": {first: 2000, second: 4000},
    }
    table = page.split('id="uj-chart-table"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-start="([^"]+)">(.*?)</tr>', table, re.S)
    cells = {
        start: re.findall(r"<td[^>]*>([^<]*)</td>", row)[1:] for start, row in rows
    }
    assert cells == {
        first: ["3", "0", "0", "0", "2000 ms"],
        second: ["0", "0", "1", "1", "4000 ms"],
    }
    assert "Mean pickup latency 2.8 s over 5 attempts in" in page
    assert re.findall(r"mean pickup [^<]*", page) == [
        "mean pickup 2.0 s over 3 attempts",
        "mean pickup 4.0 s over 2 attempts",
    ]
    assert "(s)" not in page


def test_one_queue_or_one_job_name_per_hour(admin_client, settled):
    """The selector keeps one queue's or one job name's buckets; the day
    span bins the same counts per hour."""
    hour = settled[0].replace(minute=0).isoformat()
    url = reverse(DASHBOARD)
    on_b = admin_client.get(url, {"queue": "charts-b"}).text
    assert totals(on_b) == counts(failed=1, dead=1, pickups=2)
    assert '<option value="charts-b" selected>' in on_b
    day = admin_client.get(url, {"span": "day", "job": "charts.ok"}).text
    assert charts(day) == {
        "done": {hour: 3},
        "failed": {},
        "dead": {},
        "pickup": {hour: 2000},
    }
    assert "Done per hour, last 24 hours" in day
    both = admin_client.get(
        url, {"span": "day", "queue": "charts-a", "job": "charts.broken"}
    )
    assert totals(both.text)["dead"] == 0


def test_charts_with_no_counts_say_so(admin_client, pg_driver):
    """With nothing settled every chart is drawn empty, with a note, and no
    table; an unknown span or name is no error."""
    page = admin_client.get(reverse(DASHBOARD)).text
    assert totals(page) == counts()
    assert charts(page) == {"done": {}, "failed": {}, "dead": {}, "pickup": {}}
    assert "Nothing done in the last hour" in page
    assert 'id="uj-chart-table"' not in page
    odd = admin_client.get(reverse(DASHBOARD), {"span": "week", "queue": "<nope>"})
    assert odd.status_code == 200 and 'data-span="hour"' in odd.text
    assert "&lt;nope&gt;" in odd.text and "<nope>" not in odd.text
