import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from django_ultimate_jobs import CreatePartitionedModel


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]

    operations = [
        # CreateModel, with PARTITION BY RANGE ("viewed_at"). The partitions
        # themselves come from `manage.py maintain_partitions`.
        CreatePartitionedModel(
            name="PageView",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "view_id",
                        "viewed_at",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("view_id", models.UUIDField(default=uuid.uuid4)),
                ("viewed_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "product",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="shop.product",
                    ),
                ),
            ],
            partition_by="viewed_at",
        ),
    ]
