"""The search configuration check: ``manage.py check --database default``.

A ``PostgresSearchIndex(config=...)`` is a name at import (no database then);
whether the database has that text search configuration is asked by this
check, tagged ``database`` (Django runs it with ``--database``, and
``migrate`` does), and again by the reindex pass, which fails terminally
with ``X_SEARCH_CONFIG_UNKNOWN`` rather than retrying a ``ProgrammingError``.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import DatabaseError

from .postgres import PostgresSearchIndex
from .reindex import registered_reindexes

__all__ = ["CHECK_ID", "check_search_configs"]

CHECK_ID = "ultimate_jobs.E301"


@checks.register(checks.Tags.database)
def check_search_configs(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Every declared ``PostgresSearchIndex`` names a configuration of the database."""
    if not databases:
        return []
    messages: list[checks.CheckMessage] = []
    for handle in registered_reindexes():
        index = handle.index
        if not isinstance(index, PostgresSearchIndex):
            continue
        try:
            problem = index.config_problem()
        except DatabaseError:
            continue  # no database to ask (Django reports it itself)
        if problem is not None:
            messages.append(
                checks.Error(
                    f"X_SEARCH_CONFIG_UNKNOWN: reindex {handle.name!r}: {problem}",
                    hint="name a configuration the database has (SELECT cfgname "
                    "FROM pg_ts_config), or create it",
                    id=CHECK_ID,
                )
            )
    return messages
