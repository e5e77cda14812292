"""Reindex, Export, ExportPart, Import: progress of reindex/export/import passes; SearchDocument: PostgresSearchIndex's documents.

Numbered 0014 beside other branches' 0013 and 0015; it depends on 0012 only.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

import django_ultimate_jobs.search.models


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0014_subjects_consumers"),
    ]

    operations = [
        migrations.CreateModel(
            name="Reindex",
            fields=[
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
                ("name", models.TextField(primary_key=True, serialize=False)),
                (
                    "phase",
                    models.TextField(
                        choices=[("rows", "Rows"), ("sweep", "Sweep")], default="rows"
                    ),
                ),
                ("removed", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "ultimate_jobs_reindex",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="Export",
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
                ("name", models.TextField()),
                ("prefix", models.TextField()),
                ("params", models.JSONField(blank=True, default=dict)),
                ("format", models.TextField()),
                ("bytes", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "ultimate_jobs_export",
                "ordering": ["name", "prefix"],
                "constraints": [
                    models.UniqueConstraint(
                        models.F("name"), models.F("prefix"), name="uj_export_artifact"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Import",
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
                ("name", models.TextField()),
                ("prefix", models.TextField()),
            ],
            options={
                "db_table": "ultimate_jobs_import",
                "ordering": ["name", "prefix"],
                "constraints": [
                    models.UniqueConstraint(
                        models.F("name"), models.F("prefix"), name="uj_import_artifact"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="SearchDocument",
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
                ("index_name", models.TextField()),
                ("object_id", models.TextField(db_collation="C")),
                ("document", django_ultimate_jobs.search.models.TsVectorField()),
                ("version", models.BigIntegerField(blank=True, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
            ],
            options={
                "db_table": "ultimate_jobs_search_document",
                "indexes": [
                    django_ultimate_jobs.search.models.GinIndex(
                        fields=["document"], name="uj_search_doc_gin"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        models.F("index_name"),
                        models.F("object_id"),
                        name="uj_search_doc_key",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ExportPart",
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
                ("index", models.IntegerField()),
                ("rows", models.IntegerField()),
                ("bytes", models.BigIntegerField()),
                ("sha256", models.TextField()),
                (
                    "export",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="parts",
                        to="ultimate_jobs.export",
                    ),
                ),
            ],
            options={
                "db_table": "ultimate_jobs_export_part",
                "ordering": ["export", "index"],
                "constraints": [
                    models.UniqueConstraint(
                        models.F("export"),
                        models.F("index"),
                        name="uj_export_part_index",
                    )
                ],
            },
        ),
    ]
