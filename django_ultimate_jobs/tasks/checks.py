"""System checks of a ``TASKS`` entry that uses ``UltimateJobsBackend``.

Django runs them through its own ``check_tasks`` (``backend.check()``).
Errors and warnings, never an error for missing migrations: ``migrate``
runs the checks first and must not be blocked by them.
"""

from __future__ import annotations

from django.apps import apps
from django.core import checks
from django.db import connections

from ..checks import behind_transaction_pooler, jobs_in_django_database
from ..conf import jobs_settings
from ..errors import SettingsInvalid

__all__ = ["backend_checks", "unapplied_migrations"]

APP_LABEL = "ultimate_jobs"


def backend_checks(alias: str, queues: set[str]) -> list[checks.CheckMessage]:
    """The messages for ``TASKS[alias]`` (its ``QUEUES`` given)."""
    where = f"TASKS[{alias!r}]"
    if not apps.is_installed("django_ultimate_jobs"):
        return [
            checks.Error(
                f"{where} uses django-ultimate-jobs, but 'django_ultimate_jobs' is "
                "not in INSTALLED_APPS: its tables and its worker are missing",
                hint="add 'pgtrigger' and 'django_ultimate_jobs' to INSTALLED_APPS, "
                "then python manage.py migrate",
                id="ultimate_jobs.E101",
            )
        ]
    try:
        settings = jobs_settings()
    except SettingsInvalid:
        return []  # reported as ultimate_jobs.E001
    messages: list[checks.CheckMessage] = []
    served = {*settings.queues, settings.housekeeping_queue}
    unclaimed = sorted(queue for queue in queues if queue not in served)
    if unclaimed:
        messages.append(
            checks.Warning(
                f"{where} allows the queues {', '.join(unclaimed)}, which are not in "
                "ULTIMATE_JOBS['QUEUES']: runjobs does not claim them by default",
                hint="add them to ULTIMATE_JOBS['QUEUES'], or start workers with "
                "runjobs --queues " + ",".join(unclaimed),
                id="ultimate_jobs.W103",
            )
        )
    database = settings.database
    if not jobs_in_django_database(settings) or database not in connections.settings:
        return messages  # the memory driver, or ultimate_jobs.E002
    vendor = connections[database].vendor
    if vendor != "postgresql":
        messages.append(
            checks.Error(
                f"{where} stores tasks in the {database!r} database, which is "
                f"{vendor}: django-ultimate-jobs needs PostgreSQL",
                hint="point ULTIMATE_JOBS['DATABASE'] at a PostgreSQL alias",
                id="ultimate_jobs.E102",
            )
        )
        return messages
    if settings.prepare and behind_transaction_pooler(database):
        messages.append(
            checks.Warning(
                f"{where} enqueues on {database!r}, which looks pooled in transaction "
                "mode, with prepared statements on: enqueues from web processes can "
                "fail with 'prepared statement does not exist'",
                hint="set ULTIMATE_JOBS['PREPARE'] = False (and give runjobs a "
                "direct connection: see ultimate_jobs.W001)",
                id="ultimate_jobs.W102",
            )
        )
    pending = unapplied_migrations(database)
    if pending:
        messages.append(
            checks.Warning(
                f"{where}: the django-ultimate-jobs migrations are not applied to "
                f"{database!r} ({', '.join(pending)}): enqueue and get_result fail",
                hint="python manage.py migrate " + APP_LABEL,
                id="ultimate_jobs.W101",
            )
        )
    return messages


def unapplied_migrations(using: str) -> list[str] | None:
    """This app's migrations not applied on ``using``; ``None`` if unknown.

    An unreachable database answers ``None``: ``runserver`` and ``migrate``
    report that themselves, and ``check`` must work without one.
    """
    from django.db.migrations.loader import MigrationLoader

    try:
        loader = MigrationLoader(connections[using], ignore_no_migrations=True)
        nodes = loader.graph.nodes
        applied = loader.applied_migrations
    except Exception:
        return None
    return sorted(
        f"{app}.{name}"
        for app, name in nodes
        if app == APP_LABEL and (app, name) not in applied
    )
