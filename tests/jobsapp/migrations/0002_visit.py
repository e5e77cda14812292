import uuid

from django.db import migrations, models

from django_ultimate_jobs import CreatePartitionedModel


class Migration(migrations.Migration):
    dependencies = [("jobsapp", "0001_initial")]

    operations = [
        CreatePartitionedModel(
            name="Visit",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "visit_id",
                        "at",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("visit_id", models.UUIDField(default=uuid.uuid4)),
                ("at", models.DateTimeField()),
                ("path", models.TextField(default="/")),
            ],
            partition_by="at",
        ),
    ]
