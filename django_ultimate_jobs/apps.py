"""App configuration: built-in jobs, autodiscover ``<app>/jobs.py``, checks."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class UltimateJobsConfig(AppConfig):
    """``django_ultimate_jobs``: tables prefixed ``ultimate_jobs_``."""

    name = "django_ultimate_jobs"
    label = "ultimate_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Import every installed app's ``jobs`` module, wire settings and tasks."""
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            drivers,  # noqa: F401  (driver keys in settings, driver reset)
        )
        from .conf import connect_setting_changed
        from .tracing import connect_setting_changed as trace_setting_changed

        connect_setting_changed()
        trace_setting_changed()
        # The built-in retention and partition jobs, before the apps' own.
        from .maintenance import builtin  # noqa: F401
        from .webhooks import builtin as webhooks_builtin  # noqa: F401

        autodiscover_modules("jobs")
        from .tasks.compat import SOURCE

        if SOURCE is not None:  # django.tasks (6.0+) or the django-tasks backport
            from .tasks import bridge  # noqa: F401  (registers the task job)
