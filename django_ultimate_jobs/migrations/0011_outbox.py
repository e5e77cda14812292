"""The transactional outbox table (``OutboxMessage``, spec §7).

Created wherever the app's migrations run, like every table of the app: no
router decides. With jobs in a separate database, migrate both aliases; the
outbox table is used in ``OUTBOX_DATABASE`` and the jobs tables in
``DATABASE`` (docs/howto/separate-jobs-database.md).
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0010_concurrency_and_fences"),
    ]

    operations = [
        migrations.CreateModel(
            name="OutboxMessage",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("run_id", models.UUIDField()),
                ("name", models.TextField()),
                ("queue", models.TextField()),
                ("input", models.JSONField()),
                ("idempotency_key", models.TextField(blank=True, null=True)),
                ("tenant_id", models.TextField(blank=True, null=True)),
                ("priority", models.SmallIntegerField(db_default=0)),
                ("max_attempts", models.IntegerField(db_default=3)),
                ("run_at", models.DateTimeField(blank=True, null=True)),
                ("enqueued_by", models.TextField(blank=True, null=True)),
                ("traceparent", models.TextField(blank=True, null=True)),
                ("extra", models.JSONField(blank=True, null=True)),
                (
                    "staged_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
                ("claimed_at", models.DateTimeField(blank=True, null=True)),
                ("claimed_by", models.TextField(blank=True, null=True)),
                ("published_at", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.IntegerField(db_default=0)),
                ("last_error", models.TextField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "outbox message",
                "db_table": "ultimate_jobs_outbox",
                "indexes": [
                    models.Index(
                        models.F("staged_at"),
                        models.F("id"),
                        condition=models.Q(("published_at__isnull", True)),
                        name="uj_outbox_pending_idx",
                    ),
                    models.Index(
                        models.F("published_at"),
                        condition=models.Q(("published_at__isnull", False)),
                        name="uj_outbox_published_idx",
                    ),
                ],
            },
        ),
    ]
