"""Fleet-wide concurrency and locks: the job's lease key, and one fence sequence.

A job declaring ``concurrency=`` carries the lease key its runs take a slot
under (``job:<name>`` or ``job-key:<name>:<key>``, decided at enqueue) and the
slot count, so the claim can skip a full key in SQL. Every grant of a lease
(a slot or a lock) takes its fencing number from one sequence: a later holder's
token is always greater than every earlier holder's.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ultimate_jobs", "0009_backfill")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="concurrency_key",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_limit",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS ultimate_jobs_lease_fence",
            "DROP SEQUENCE IF EXISTS ultimate_jobs_lease_fence",
        ),
    ]
