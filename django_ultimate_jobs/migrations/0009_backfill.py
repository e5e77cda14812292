"""Backfill: the progress of each declared backfill()."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ultimate_jobs", "0008_ledger")]

    operations = [
        migrations.CreateModel(
            name="Backfill",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                (
                    "state",
                    models.TextField(
                        choices=[
                            ("pending", "Pending"),
                            ("running", "Running"),
                            ("paused", "Paused"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                    ),
                ),
                ("cursor", models.JSONField(blank=True, null=True)),
                ("rows_done", models.BigIntegerField(default=0)),
                ("pages_done", models.IntegerField(default=0)),
                ("total", models.BigIntegerField(blank=True, null=True)),
                ("run_id", models.UUIDField(blank=True, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
                ("error", models.TextField(blank=True, default="")),
            ],
            options={"db_table": "ultimate_jobs_backfill", "ordering": ["name"]},
        ),
    ]
