"""A settle that loses a deadlock is written again, not given up.

Two workers' settles once locked the per-minute counter rows in opposite
orders (they are now upserted in name order); whatever else makes a settle
a deadlock's victim, the server rolled the statement back whole, so the
worker writes it again. Given up, the bodies that ran would wait out their
leases and run again.
"""

from __future__ import annotations

import logging

import psycopg
import pytest
from django.db import connection

from django_ultimate_jobs.models import Job
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.runner import Worker
from tests.support.waiting import wait_until
from tests.support.workers import database_url, start_worker_thread

pytestmark = pytest.mark.postgres

SETTLE_WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = %s AND application_name LIKE 'uj:settle:%%' AND wait_event_type = 'Lock'
"""


def test_a_settle_chosen_as_a_deadlock_victim_is_written_again(
    committed_pg_driver, declare_jobs, caplog
):
    """Another transaction holds this minute's counter row of the job's name
    and then asks for the job row the settle holds: PostgreSQL aborts the
    settle (its deadlock check fires first). The job still ends done at
    attempt 1 on its first claim, long before its 60 s lease could lapse."""

    @declare_jobs("dl", "t.dl")()
    def quick(ctx):
        return None

    url, database = (
        database_url(connection.settings_dict),
        connection.settings_dict["NAME"],
    )
    caplog.set_level(logging.INFO, logger="django_ultimate_jobs")
    config = WorkerConfig.from_settings(
        queues=("dl",), visibility_ms=60_000, heartbeat_ms=20_000, poll_ms=50
    )
    worker = Worker(config, driver=committed_pg_driver)

    with (
        psycopg.connect(url) as blocker,
        psycopg.connect(url, autocommit=True) as watcher,
    ):
        # Ours waits the longest before it checks: the settle is the victim.
        blocker.execute("SET deadlock_timeout = '30s'")
        for minute in (0, 1):  # the settle may land in the next minute
            blocker.execute(
                "INSERT INTO ultimate_jobs_job_counter (job, queue, bucket_ms, "
                "bucket_start, done, retried, failed, dead, duration_ms) "
                "VALUES (%s, 'dl', 60000, "
                "date_trunc('minute', now()) + %s * interval '1 minute',"
                " 0, 0, 0, 0, 0) ON CONFLICT (job, queue, bucket_ms, bucket_start) "
                "DO UPDATE SET done = ultimate_jobs_job_counter.done",
                (quick.name, minute),
            )
        runner = start_worker_thread(worker)
        try:
            job_id = quick.enqueue().id
            # (Read on a connection of its own: a transaction sees one
            # snapshot of pg_stat_activity.)
            wait_until(
                lambda: watcher.execute(
                    SETTLE_WAITING_ON_A_LOCK, (database,)
                ).fetchone()[0],
                15,
                message=lambda: caplog.text,
            )
            # Wait for the job row the settle holds: a deadlock, which the
            # settle's backend detects (after 1 s) and loses.
            blocker.execute(
                "UPDATE ultimate_jobs_job SET updated_at = updated_at WHERE id = %s",
                (job_id,),
            )
            blocker.commit()
            wait_until(
                lambda: Job.objects.get(id=job_id).state == "done",
                15,
                message=lambda: caplog.text,
            )
        finally:
            worker.request_stop(deadline_s=5)
            runner.join(10)
    row = Job.objects.get(id=job_id)
    assert (row.state, row.attempt, row.claims) == ("done", 1, 1)
    retried = [r for r in caplog.records if r.msg == "jobs.settle.retried"]
    assert [r.sqlstate for r in retried] == ["40P01"]
    assert "jobs.worker.settle-failed" not in caplog.text
