"""The coded errors of a statement that failed for a known reason.

A read-only database (a standby, ``default_transaction_read_only``) is
``X_DRIVER_UNAVAILABLE``; a jobs table that does not exist (``migrate`` not
run, the app not installed) is ``X_JOBS_TABLES_MISSING``. Looked at only
once a statement failed: the hot path pays nothing for a clear answer. The
outbox store reads its failures the same way.
"""

from __future__ import annotations

import re

import psycopg
from django.apps import apps
from django.db import DatabaseError

from ...errors import DriverUnavailable, JobsTablesMissing

__all__ = ["coded_failure"]


def coded_failure(using: str, error: DatabaseError) -> Exception | None:
    """The coded error for a statement that failed for a known reason, or None."""
    cause = error.__cause__
    if isinstance(cause, psycopg.errors.ReadOnlySqlTransaction):
        return DriverUnavailable(
            "the jobs database refuses writes (a read-only standby, or "
            "default_transaction_read_only is on); nothing was written",
            fix="point ULTIMATE_JOBS['DATABASE'] at the primary, or turn "
            "default_transaction_read_only off",
        )
    missing = _missing_jobs_table(error)
    return None if missing is None else _tables_missing(using, missing)


_UNDEFINED_TABLE = re.compile(r'relation "(ultimate_jobs_\w+)" does not exist')


def _missing_jobs_table(error: DatabaseError) -> str | None:
    """The jobs table a failed statement did not find, or None."""
    cause = error.__cause__
    if not isinstance(cause, psycopg.errors.UndefinedTable):
        return None
    found = _UNDEFINED_TABLE.search(str(cause))
    return found.group(1) if found else None


def _tables_missing(using: str, table: str) -> JobsTablesMissing:
    meta = {"table": table, "database": using}
    # Before django.setup() the registry cannot tell: say "migrate".
    if apps.apps_ready and not apps.is_installed("django_ultimate_jobs"):
        return JobsTablesMissing(
            f'the jobs table {table} does not exist: "django_ultimate_jobs" is not '
            "in INSTALLED_APPS, so migrate never created it",
            fix='add "pgtrigger" and "django_ultimate_jobs" to INSTALLED_APPS, '
            "then run python manage.py migrate",
            meta=meta,
        )
    database = "" if using == "default" else f" --database {using}"
    return JobsTablesMissing(
        f"the jobs table {table} does not exist in the database {using!r}: "
        "the django_ultimate_jobs migrations have not run there",
        fix=f"python manage.py migrate ultimate_jobs{database}",
        meta=meta,
    )
