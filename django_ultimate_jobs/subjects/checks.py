"""The personal-data coverage check: ``manage.py check`` fails on a gap.

Registered when :mod:`django_ultimate_jobs.subjects` is imported, which
any ``personal_data`` mark or ``subject(...)`` does.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from .declaration import personal_data_problems

__all__ = ["CHECK_IDS", "check_personal_data"]

CHECK_IDS = {
    "X_PERSONAL_DATA_UNREACHED": "ultimate_jobs.E201",
    "X_PERSONAL_DATA_UNERASED": "ultimate_jobs.E202",
}


@checks.register(checks.Tags.models)
def check_personal_data(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Every marked field is reached by a subject whose erase deals with it."""
    labels = None if app_configs is None else {c.label for c in app_configs}
    return [
        checks.Error(
            f"{problem.code}: {problem.cause}",
            hint=problem.fix,
            id=CHECK_IDS[problem.code],
            obj=problem.meta["model"],
        )
        for problem in personal_data_problems(labels)
    ]
