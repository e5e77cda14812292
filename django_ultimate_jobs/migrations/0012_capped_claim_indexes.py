"""The capped claim's index: ready rows carrying a concurrency key, by key.

Rows that carry a concurrency key leave the ready index the uncapped claim
scans, so a backlog waiting for slots never slows the claim of the rows
beside it; the capped claim (``job_claim_capped``) finds them by key, one
index probe per key, stepping over a full key without reading its backlog.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ultimate_jobs", "0011_outbox")]

    operations = [
        migrations.RemoveIndex(model_name="job", name="uj_job_ready_idx"),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("queue"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("run_at"),
                models.F("id"),
                condition=models.Q(
                    ("concurrency_key__isnull", True), ("state", "ready")
                ),
                name="uj_job_ready_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("concurrency_key"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("run_at"),
                models.F("id"),
                condition=models.Q(
                    ("concurrency_key__isnull", False), ("state", "ready")
                ),
                name="uj_job_capped_ready_idx",
            ),
        ),
    ]
