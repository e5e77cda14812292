"""A reindex survives a worker SIGKILLed in its rows phase and one in its sweep.

Judged by the tables: ``tests.articles`` (tests/jobsapp/jobs.py) writes
through ``CountingIndex``, which counts each document's writes in
``IndexWrite`` in the page's own transaction, so ``writes == 1`` on every
row means every page was written once; the index holds exactly the
published articles (stale documents and unpublished rows swept away); the
``Reindex`` row and the job say done.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_ultimate_jobs.models import Job, Reindex, SearchDocument, Step
from django_ultimate_jobs.search.reindex import enqueue_reindex
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

NAME = "tests.articles"  # batch=1000, rate=200, source: group 1, published
ARTICLES = 20_000
UNPUBLISHED = 1_000  # the first 1,000 (indexed once, then unpublished)
STALE = 30_000  # documents of rows that never existed
DEADLINE_S = 60.0


def _row() -> Reindex | None:
    return Reindex.objects.filter(name=NAME).first()


def _seed() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobsapp_article (grp, title, body, published, updated_at) "
            "SELECT 1, 'article ' || n, 'the body of article ' || n, n > %s, now() "
            "FROM generate_series(1, %s) AS n",
            [UNPUBLISHED, ARTICLES],
        )
        cursor.execute(
            "INSERT INTO ultimate_jobs_search_document "
            "(index_name, object_id, document, version, updated_at) "
            "SELECT %s, (900000000 + n)::text, to_tsvector('simple', 'stale'), "
            "NULL, now() FROM generate_series(1, %s) AS n",
            [NAME, STALE],
        )
        # The unpublished rows were indexed while they were published.
        cursor.execute(
            "INSERT INTO ultimate_jobs_search_document "
            "(index_name, object_id, document, version, updated_at) "
            "SELECT %s, id::text, to_tsvector('simple', title), NULL, now() "
            "FROM jobsapp_article WHERE grp = 1 AND NOT published",
            [NAME],
        )


def _writes() -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT writes, count(*) FROM jobsapp_indexwrite "
            "WHERE index_name = %s GROUP BY writes",
            [NAME],
        )
        return dict(cursor.fetchall())


def _indexed_is_published() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM ((SELECT object_id FROM ultimate_jobs_search_document "
            "WHERE index_name = %s) EXCEPT ALL (SELECT id::text FROM jobsapp_article "
            "WHERE grp = 1 AND published)) AS extra",
            [NAME],
        )
        (extra,) = cursor.fetchone()
    return extra == 0


def test_a_reindex_survives_a_worker_killed_in_each_phase(fleet):
    _seed()
    published = ARTICLES - UNPUBLISHED
    job_id = enqueue_reindex(NAME).id

    first = fleet.start(name="a")
    wait_until(
        lambda: (row := _row()) is not None and row.rows_done >= 6_000,
        DEADLINE_S,
        0.01,
        message=fleet.logs,
    )
    assert first.kill() == -9
    in_rows = _row()
    second = fleet.start(name="b")
    wait_until(
        lambda: (
            (row := _row()) is not None
            and row.phase == "sweep"
            and row.removed >= 5_000
        ),
        DEADLINE_S,
        0.01,
        message=fleet.logs,
    )
    assert second.kill() == -9
    in_sweep = _row()
    fleet.start(name="c")
    wait_until(
        lambda: (row := _row()) is not None and row.state == "done",
        DEADLINE_S,
        message=fleet.logs,
    )

    # Both kills landed mid-phase.
    assert in_rows.phase == "rows" and 6_000 <= in_rows.rows_done < published
    assert in_sweep.phase == "sweep"
    assert in_sweep.removed < STALE + UNPUBLISHED
    # Every published row written once, nothing else written.
    assert _writes() == {1: published}
    assert SearchDocument.objects.filter(index_name=NAME).count() == published
    assert _indexed_is_published()
    row = _row()
    assert (row.rows_done, row.total, row.removed) == (
        published,
        published,
        STALE + UNPUBLISHED,
    )
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("done", 3)
    steps = Step.objects.filter(run_id=job.run_id)
    assert set(steps.values_list("status", flat=True)) == {"completed"}
    # 19 full pages of rows (19,000 = 19 x 1,000), then the empty look.
    assert steps.filter(name__startswith="page-").count() == published // 1000 + 1
