"""The coded errors of ``reindex(...)`` and the search helpers."""

from __future__ import annotations

from ..errors import JobsError, RetryClass

__all__ = [
    "ReindexDeclarationInvalid",
    "ReindexUnknown",
    "SearchConfigUnknown",
    "SearchQueryInvalid",
]


class ReindexDeclarationInvalid(JobsError):
    """A ``reindex(...)`` declaration is invalid (an unknown model or field...)."""

    code = "X_REINDEX_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass name=, model= (a model or 'app_label.Model'), index= (a search "
        "index such as PostgresSearchIndex()) and fields= naming its fields"
    )


class ReindexUnknown(JobsError):
    """No reindex is declared under that name."""

    code = "X_REINDEX_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs_reindex --list  (lists the declared reindexes)"


class SearchConfigUnknown(JobsError):
    """``PostgresSearchIndex(config=...)`` names no text search configuration
    of the database (checked there: a name is all the declaration knows)."""

    code = "X_SEARCH_CONFIG_UNKNOWN"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "name a configuration the database has (SELECT cfgname FROM "
        "pg_ts_config: english, simple, german...), or create it"
    )


class SearchQueryInvalid(JobsError):
    """A search was asked with a query or a limit it cannot run."""

    code = "X_SEARCH_QUERY_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass the query as a string of at most 1,000 characters without NUL, "
        "and limit as a whole number from 1 to 10,000"
    )
