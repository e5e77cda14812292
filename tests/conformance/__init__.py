"""The driver conformance suite run on every driver this project ships."""

import pytest

# The checks live in the package, not in test modules: without this their
# failed asserts would not show the compared values.
pytest.register_assert_rewrite(
    "django_ultimate_jobs.testing.conformance",
    "django_ultimate_jobs.testing.conformance_operator",
    "django_ultimate_jobs.testing.conformance_bulk",
    "django_ultimate_jobs.testing.conformance_cron",
    "django_ultimate_jobs.testing.conformance_leases",
    "django_ultimate_jobs.testing.conformance_limits",
    "django_ultimate_jobs.testing.conformance_fairness",
)
