import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobsapp", "0004_invoice")]

    operations = [
        migrations.CreateModel(
            name="SlotRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("job_id", models.UUIDField()),
                ("key", models.TextField()),
                ("worker", models.TextField()),
                (
                    "started_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
                ("ended_at", models.DateTimeField(null=True)),
            ],
        ),
    ]
