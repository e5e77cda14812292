"""Vacuum and analyze the job table more eagerly than PostgreSQL's default.

Every claim and settle leaves a dead tuple behind, and the claim's index
scans walk past them until vacuum runs; the defaults (20% of the table for
vacuum, 10% for analyze) let a busy queue collect hundreds of thousands of
dead rows, the failure mode Brandur Leach described in "Postgres Job Queues
& Failure By MVCC". Fresh statistics also keep the planner on the partial
indexes the hot path was written for (the wake-slot check in job_enqueue
picks the wrong index on an unanalyzed table).
"""

from django.db import migrations

SETTINGS = (
    "autovacuum_vacuum_scale_factor = 0.02, "
    "autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_vacuum_insert_scale_factor = 0.05"
)


class Migration(migrations.Migration):
    dependencies = [("ultimate_jobs", "0001_initial")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE ultimate_jobs_job SET ({SETTINGS})",
            "ALTER TABLE ultimate_jobs_job RESET (autovacuum_vacuum_scale_factor, "
            "autovacuum_analyze_scale_factor, autovacuum_vacuum_insert_scale_factor)",
        )
    ]
