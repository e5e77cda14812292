"""JobCounter: a bucket per job name and queue, and the pickup latency sum.

The dashboard charts outcomes per queue and the mean pickup latency from
the counters. Buckets written before carry the queue "".
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0016_metrics_snapshot"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobcounter",
            name="queue",
            field=models.TextField(db_default=""),
        ),
        migrations.AddField(
            model_name="jobcounter",
            name="pickups",
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="jobcounter",
            name="pickup_ms",
            field=models.BigIntegerField(db_default=0),
        ),
        migrations.RemoveConstraint(
            model_name="jobcounter",
            name="uj_counter_bucket_uniq",
        ),
        migrations.AddConstraint(
            model_name="jobcounter",
            constraint=models.UniqueConstraint(
                models.F("job"),
                models.F("queue"),
                models.F("bucket_ms"),
                models.F("bucket_start"),
                name="uj_counter_bucket_queue_uniq",
            ),
        ),
    ]
