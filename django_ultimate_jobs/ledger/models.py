"""The ledger tables: postings and their lines, append-only in the database.

Imported by ``django_ultimate_jobs.models`` (the app's models module), never
by ``django_ultimate_jobs.ledger`` itself, so importing the ledger API
touches no model.
"""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.db.models.functions import Now

# 2**53-1, as ledger.money.MAX_SAFE_MINOR (not imported: this module stays
# free of the ledger API, and a migration copies the number anyway).
_MAX_SAFE_MINOR = 9007199254740991

__all__ = ["LedgerLine", "LedgerPosting"]


def _append_only(table: str) -> pgtrigger.Protect:
    # A row trigger: raw SQL is refused too, not only the ORM. TRUNCATE is
    # left alone (a statement, not rows): Django's test flush needs it.
    return pgtrigger.Protect(
        name=f"uj_{table}_append_only",
        operation=pgtrigger.Update | pgtrigger.Delete,
    )


# After each statement that inserts lines, the lines it inserted for each
# posting must be that posting's lines 1..line_count, summing to zero per
# currency. The book writes a posting's lines in the statement that writes
# the posting, so this holds for it; with the unique (posting, line) index it
# also means raw SQL cannot add a line to a stored posting (its numbers are
# taken) nor store an unbalanced one. It reads the statement's own rows and
# each posting's row by key, never the lines table.
_WHOLE_POSTINGS = """
IF EXISTS (
    SELECT 1
      FROM new_lines AS l
      JOIN ultimate_jobs_ledger_posting AS p ON p.id = l.posting_id
     GROUP BY p.id
    HAVING count(*) <> min(p.line_count)
        OR min(l.line) <> 1
        OR max(l.line) <> min(p.line_count)
) OR EXISTS (
    SELECT 1 FROM new_lines GROUP BY posting_id, currency HAVING sum(minor) <> 0
) THEN
    RAISE EXCEPTION 'ledger: a posting''s lines are written whole, in one statement, and balance in each currency'
        USING ERRCODE = 'check_violation';
END IF;
RETURN NULL;
"""


class LedgerPosting(models.Model):
    """One posting: written once per ``(tenant, key)``; never changed."""

    id = models.BigAutoField(primary_key=True)
    ledger = models.TextField()
    """The ``ledger(name=...)`` that wrote it."""
    tenant = models.TextField()
    key = models.TextField()
    org_id = models.TextField(null=True, blank=True)
    fingerprint = models.TextField()
    """sha256 of the lines and org_id: a replay under the key must match it."""
    line_count = models.SmallIntegerField()
    posted_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "ultimate_jobs_ledger_posting"
        constraints = [
            # The idempotency of a posting: the write is INSERT ... ON
            # CONFLICT DO NOTHING on this constraint, never a read first.
            models.UniqueConstraint("tenant", "key", name="uj_ledger_posting_key_uniq")
        ]
        triggers = [_append_only("ledger_posting")]

    def __str__(self) -> str:
        return f"{self.key} ({self.tenant})"


class LedgerLine(models.Model):
    """One line of a posting: ``minor`` units of ``currency`` on ``account``.

    Positive amounts are debits, negative ones credits; each posting's lines
    sum to zero per currency. Corrections are new postings.
    """

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the unique (posting, line) index serves it, and
    # one index fewer is one write fewer per line.
    posting = models.ForeignKey(
        LedgerPosting, on_delete=models.PROTECT, related_name="lines", db_index=False
    )
    tenant = models.TextField()
    line = models.SmallIntegerField()
    account = models.TextField()
    currency = models.CharField(max_length=3)
    minor = models.BigIntegerField()
    posted_at = models.DateTimeField()
    """The posting's ``posted_at``, copied so balances as of a time read one table."""

    class Meta:
        db_table = "ultimate_jobs_ledger_line"
        constraints = [
            models.UniqueConstraint("posting", "line", name="uj_ledger_line_uniq"),
            # What the job checks, held by the database too: raw SQL cannot
            # store a line the book would refuse to write.
            models.CheckConstraint(
                condition=models.Q(currency__regex=r"^[A-Z]{3}$"),
                name="uj_ledger_line_currency",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    minor__gte=-_MAX_SAFE_MINOR, minor__lte=_MAX_SAFE_MINOR
                ),
                name="uj_ledger_line_minor_safe",
            ),
        ]
        indexes = [
            # Balances: one account's lines, per currency, up to a time.
            models.Index(
                "account", "currency", "posted_at", name="uj_ledger_line_account_idx"
            )
        ]
        triggers = [
            _append_only("ledger_line"),
            pgtrigger.Trigger(
                name="uj_ledger_line_whole_postings",
                level=pgtrigger.Statement,
                when=pgtrigger.After,
                operation=pgtrigger.Insert,
                referencing=pgtrigger.Referencing(new="new_lines"),
                func=_WHOLE_POSTINGS,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.minor} {self.currency}"
