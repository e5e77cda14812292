"""System checks: settings valid, the jobs database is PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections

from .conf import jobs_settings
from .errors import SettingsInvalid


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``ULTIMATE_JOBS`` parses, and its database is a PostgreSQL alias."""
    try:
        settings = jobs_settings()
    except SettingsInvalid as error:
        return [checks.Error(error.cause, hint=error.fix, id="ultimate_jobs.E001")]
    if settings.driver != "postgres":
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
