from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobsapp", "0002_visit")]

    operations = [
        migrations.CreateModel(
            name="BackfillItem",
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
                ("grp", models.SmallIntegerField()),
                ("handled", models.IntegerField(default=0)),
            ],
        ),
    ]
