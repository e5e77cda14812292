"""MetricsSnapshot: the fleet's shared, cached read of the queues (metrics)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0015_reindex_export"),
    ]

    operations = [
        migrations.CreateModel(
            name="MetricsSnapshot",
            fields=[
                ("key", models.TextField(primary_key=True, serialize=False)),
                ("taken_at", models.DateTimeField()),
                ("payload", models.JSONField(default=dict)),
                ("reads", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "ultimate_jobs_metrics_snapshot",
            },
        ),
    ]
