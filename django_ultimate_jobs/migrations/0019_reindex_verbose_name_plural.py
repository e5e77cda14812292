"""The admin index says "Reindexes", not "Reindexs" (no schema change)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0018_step_matched_index"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="reindex",
            options={"ordering": ["name"], "verbose_name_plural": "reindexes"},
        ),
    ]
