"""uj_step_matched_idx: the completed waits that took an event (the events page).

Built CONCURRENTLY: the step table can be large, and a plain CREATE INDEX
would block every step write while it builds.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ultimate_jobs", "0017_counter_queue_pickup"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="step",
            index=models.Index(
                models.F("cursor_id"),
                condition=models.Q(
                    ("cursor_id__isnull", False), ("status", "completed")
                ),
                name="uj_step_matched_idx",
            ),
        ),
    ]
