"""A backfill over 200,000 rows survives two SIGKILLed workers, with flat memory.

Judged by the tables: the handler adds 1 to ``handled`` inside each page's
atomic step, so every row at exactly 1 means every page was handled once;
each page's step is recorded once; the ``Backfill`` row says done. Memory:
the peak RSS of a worker that walked 80,000+ rows is compared with one that
walked 20,000: loading the QuerySet whole would grow it by tens of MB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.db import connection

from django_ultimate_jobs.backfills import BACKFILL_JOB_PREFIX, enqueue_backfill
from django_ultimate_jobs.models import Backfill, Job, Step
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads VmHWM from /proc"
    ),
]

BIG, SMALL = 200_000, 20_000
PAGE = 2000  # tests.items_big / tests.items_small: batch=2000, rate=40
DEADLINE_S = 30.0
MEMORY_SLACK_MB = 15.0


def _insert(group: int, count: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobsapp_backfillitem (grp, handled) "
            "SELECT %s, 0 FROM generate_series(1, %s)",
            [group, count],
        )


def _progress(name: str) -> Backfill | None:
    return Backfill.objects.filter(name=name).first()


def _rows_done(name: str) -> int:
    row = _progress(name)
    return row.rows_done if row is not None else 0


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM line in /proc/<pid>/status")


def _handled_counts(group: int) -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT handled, count(*) FROM jobsapp_backfillitem "
            "WHERE grp = %s GROUP BY handled",
            [group],
        )
        return dict(cursor.fetchall())


def _done(name: str) -> bool:
    row = _progress(name)
    return row is not None and row.state == "done"


def test_a_backfill_survives_two_killed_workers_handling_each_row_once(fleet):
    _insert(1, SMALL)
    _insert(2, BIG)

    # The small pass: the memory baseline.
    enqueue_backfill("tests.items_small")
    small = fleet.start(name="small")
    wait_until(lambda: _done("tests.items_small"), DEADLINE_S, message=fleet.logs)
    small_peak = _peak_rss_mb(small.pid)
    small.kill()
    assert _handled_counts(1) == {1: SMALL}

    # The big pass, killed at two points of its progress.
    big = "tests.items_big"
    job_id = enqueue_backfill(big).id
    killed_at = []
    for name, rows in (("a", 40_000), ("b", 120_000)):
        worker = fleet.start(name=name)
        wait_until(
            lambda rows=rows: _rows_done(big) >= rows,
            DEADLINE_S,
            0.01,
            message=fleet.logs,
        )
        assert worker.kill() == -9
        killed_at.append(_rows_done(big))
    last = fleet.start(name="c")
    wait_until(lambda: _done(big), DEADLINE_S, message=fleet.logs)
    big_peak = _peak_rss_mb(last.pid)

    assert killed_at[0] < killed_at[1] < BIG, killed_at  # both kills were mid-pass
    assert _handled_counts(2) == {1: BIG}  # every row once, none twice
    row = _progress(big)
    assert (row.state, row.rows_done, row.pages_done, row.total) == (
        "done",
        BIG,
        BIG // PAGE,
        BIG,
    )
    job = Job.objects.get(id=job_id)
    assert (job.name, job.state, job.attempt) == (BACKFILL_JOB_PREFIX + big, "done", 3)
    pages = list(
        Step.objects.filter(run_id=job.run_id, name__startswith="page-").values_list(
            "name", "status"
        )
    )
    # 100 full pages, then the empty look that ends the pass.
    assert sorted(pages) == sorted(
        (f"page-{n}", "completed") for n in range(BIG // PAGE + 1)
    )
    # The last worker walked 80,000+ rows (40+ pages), four times the small pass.
    print(f"peak RSS: small pass {small_peak:.1f} MB, big pass {big_peak:.1f} MB")
    assert big_peak < small_peak + MEMORY_SLACK_MB, (small_peak, big_peak)
