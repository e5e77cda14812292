"""System checks: settings valid, the jobs database is PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections

from .conf import JobsSettings, jobs_settings
from .drivers import driver_class
from .errors import SettingsInvalid


def jobs_in_django_database(settings: JobsSettings) -> bool:
    """Whether the driver keeps the jobs in ``DATABASE`` (a declared feature)."""
    return driver_class(settings.driver).features.django_database


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``ULTIMATE_JOBS`` parses, and its database is a PostgreSQL alias."""
    try:
        settings = jobs_settings()
    except SettingsInvalid as error:
        return [checks.Error(error.cause, hint=error.fix, id="ultimate_jobs.E001")]
    if not jobs_in_django_database(settings):
        return []
    if settings.database not in connections.settings:
        return [
            checks.Error(
                f"ULTIMATE_JOBS['DATABASE'] names {settings.database!r}, "
                "which DATABASES does not define",
                hint="set ULTIMATE_JOBS['DATABASE'] to a DATABASES alias",
                id="ultimate_jobs.E002",
            )
        ]
    vendor = connections[settings.database].vendor
    if vendor != "postgresql":
        return [
            checks.Error(
                f"django-ultimate-jobs needs PostgreSQL; the {settings.database!r} "
                f"database is {vendor}",
                hint="point ULTIMATE_JOBS['DATABASE'] at a PostgreSQL alias, "
                "or use DRIVER 'memory' in tests",
                id="ultimate_jobs.E003",
            )
        ]
    return []


@checks.register(checks.Tags.compatibility)
def check_outbox(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``OUTBOX_DATABASE`` is an alias; jobs in another database than the
    callers' need the outbox.

    Without it, ``enqueue()`` inside ``transaction.atomic()`` on the
    callers' database inserts on another connection: the job survives the
    caller's rollback, and a crash after the caller's commit can lose it.
    """
    try:
        settings = jobs_settings()
    except SettingsInvalid:
        return []  # reported by check_settings
    if settings.outbox_database not in connections.settings:
        # Looked at whatever the driver: the outbox table is a Django
        # table, read by every relay (each runjobs runs one by default).
        from .outbox.store import OUTBOX_DATABASE_FIX

        return [
            checks.Error(
                f"ULTIMATE_JOBS['OUTBOX_DATABASE'] names {settings.outbox_database!r}, "
                "which DATABASES does not define",
                hint=OUTBOX_DATABASE_FIX,
                id="ultimate_jobs.E005",
            )
        ]
    if not jobs_in_django_database(settings) or settings.outbox:
        return []
    if settings.database == settings.outbox_database:
        return []
    return [
        checks.Error(
            f"the jobs live in the {settings.database!r} database but enqueues run "
            f"in transactions on {settings.outbox_database!r}, and the outbox is "
            "off: a job would not commit or roll back with the enqueuer's "
            "transaction",
            hint="set ULTIMATE_JOBS['OUTBOX'] = True (or 'required'); see "
            "docs/howto/separate-jobs-database.md",
            id="ultimate_jobs.E004",
        )
    ]


def behind_transaction_pooler(using: str) -> bool:
    """Best guess that ``using`` goes through a transaction-pooling proxy.

    Django's documented setting for PgBouncer in transaction mode is
    ``DISABLE_SERVER_SIDE_CURSORS``; 6432 is PgBouncer's default port.
    """
    entry = connections.settings[using]
    return (
        bool(entry.get("DISABLE_SERVER_SIDE_CURSORS"))
        or str(entry.get("PORT")) == "6432"
    )


@checks.register(checks.Tags.compatibility)
def check_pooler(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when LISTEN or prepared statements meet a transaction pooler."""
    try:
        settings = jobs_settings()
    except SettingsInvalid:
        return []  # reported by check_settings
    if (
        not jobs_in_django_database(settings)
        or settings.database not in connections.settings
    ):
        return []
    if not behind_transaction_pooler(settings.database):
        return []
    messages: list[checks.CheckMessage] = []
    if settings.wake:
        messages.append(
            checks.Warning(
                "the jobs database looks pooled in transaction mode: LISTEN is "
                "accepted and nothing is delivered, so workers fall back to polling",
                hint="give workers a direct or session-pooled DATABASES entry, or set "
                "ULTIMATE_JOBS['WAKE'] = False to say polling is intended",
                id="ultimate_jobs.W001",
            )
        )
    if settings.prepare:
        messages.append(
            checks.Warning(
                "prepared statements break behind PgBouncer in transaction mode "
                "(before PgBouncer 1.21 with max_prepared_statements)",
                hint="set ULTIMATE_JOBS['PREPARE'] = False",
                id="ultimate_jobs.W002",
            )
        )
    return messages
