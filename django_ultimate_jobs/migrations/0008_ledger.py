"""The ledger: append-only postings and lines (Protect triggers refuse UPDATE and
DELETE; CHECK constraints hold each line's currency and amount;
a statement trigger keeps each posting whole and balanced)."""

import django.db.models.deletion
import django.db.models.functions.datetime
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0007_job_started_claim"),
    ]

    operations = [
        migrations.CreateModel(
            name="LedgerPosting",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("ledger", models.TextField()),
                ("tenant", models.TextField()),
                ("key", models.TextField()),
                ("org_id", models.TextField(blank=True, null=True)),
                ("fingerprint", models.TextField()),
                ("line_count", models.SmallIntegerField()),
                (
                    "posted_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
            ],
            options={
                "db_table": "ultimate_jobs_ledger_posting",
                "constraints": [
                    models.UniqueConstraint(
                        models.F("tenant"),
                        models.F("key"),
                        name="uj_ledger_posting_key_uniq",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="LedgerLine",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("tenant", models.TextField()),
                ("line", models.SmallIntegerField()),
                ("account", models.TextField()),
                ("currency", models.CharField(max_length=3)),
                ("minor", models.BigIntegerField()),
                ("posted_at", models.DateTimeField()),
                (
                    "posting",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="lines",
                        to="ultimate_jobs.ledgerposting",
                    ),
                ),
            ],
            options={
                "db_table": "ultimate_jobs_ledger_line",
            },
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="ledgerposting",
            trigger=pgtrigger.compiler.Trigger(
                name="uj_ledger_posting_append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",
                    hash="4a3afee0eefef555cd8e9b27294c655b1a585204",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_uj_ledger_posting_append_only_e109e",
                    table="ultimate_jobs_ledger_posting",
                    when="BEFORE",
                ),
            ),
        ),
        migrations.AddIndex(
            model_name="ledgerline",
            index=models.Index(
                models.F("account"),
                models.F("currency"),
                models.F("posted_at"),
                name="uj_ledger_line_account_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="ledgerline",
            constraint=models.UniqueConstraint(
                models.F("posting"), models.F("line"), name="uj_ledger_line_uniq"
            ),
        ),
        migrations.AddConstraint(
            model_name="ledgerline",
            constraint=models.CheckConstraint(
                condition=models.Q(("currency__regex", "^[A-Z]{3}$")),
                name="uj_ledger_line_currency",
            ),
        ),
        migrations.AddConstraint(
            model_name="ledgerline",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("minor__gte", -9007199254740991), ("minor__lte", 9007199254740991)
                ),
                name="uj_ledger_line_minor_safe",
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="ledgerline",
            trigger=pgtrigger.compiler.Trigger(
                name="uj_ledger_line_append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",
                    hash="e93ae2279851fbfbddc481019f1fedf9911faa4d",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_uj_ledger_line_append_only_39cd6",
                    table="ultimate_jobs_ledger_line",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="ledgerline",
            trigger=pgtrigger.compiler.Trigger(
                name="uj_ledger_line_whole_postings",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="\nIF EXISTS (\n    SELECT 1\n      FROM new_lines AS l\n      JOIN ultimate_jobs_ledger_posting AS p ON p.id = l.posting_id\n     GROUP BY p.id\n    HAVING count(*) <> min(p.line_count)\n        OR min(l.line) <> 1\n        OR max(l.line) <> min(p.line_count)\n) OR EXISTS (\n    SELECT 1 FROM new_lines GROUP BY posting_id, currency HAVING sum(minor) <> 0\n) THEN\n    RAISE EXCEPTION 'ledger: a posting''s lines are written whole, in one statement, and balance in each currency'\n        USING ERRCODE = 'check_violation';\nEND IF;\nRETURN NULL;\n",
                    hash="1d2d4582052955592ebf00d096e9252041055cd2",
                    level="STATEMENT",
                    operation="INSERT",
                    pgid="pgtrigger_uj_ledger_line_whole_postings_c8836",
                    referencing="REFERENCING NEW TABLE AS new_lines ",
                    table="ultimate_jobs_ledger_line",
                    when="AFTER",
                ),
            ),
        ),
    ]
