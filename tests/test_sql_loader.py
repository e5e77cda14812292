"""The named-query loader and the shape of the statements it hands out."""

from __future__ import annotations

import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from django_ultimate_jobs.drivers.postgres.sql import queries

FILES = pytest.mark.parametrize(
    "filename", ["queries.sql", "maintenance.sql", "ledger.sql", "leases.sql"]
)


@FILES
def test_statements_carry_no_comments(filename):
    """Statements are collapsed onto one line: a comment would swallow the rest."""
    assert [name for name, text in queries(filename).items() if "--" in text] == []


@FILES
def test_statements_fit_psycopg_placeholder_cache(filename):
    """Every statement stays under psycopg's 4,096-byte conversion cache.

    Past it psycopg re-parses the placeholders of every call; for the
    claim, that was a fifth of the claim loop's time.
    """
    too_long = {
        name: len(text.encode())
        for name, text in queries(filename).items()
        if len(text.encode()) > MAX_CACHED_STATEMENT_LENGTH
    }
    assert too_long == {}
