"""Job.started_claim: which claim's body is known to have started."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ultimate_jobs", "0006_cron_tasks")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="started_claim",
            # A database default: PostgreSQL adds the column without a
            # rewrite, and the raw inserts of the hot path need not name it.
            field=models.IntegerField(db_default=0),
        ),
    ]
