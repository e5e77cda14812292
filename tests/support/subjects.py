"""Fixtures and helpers of the data-subject tests (tests/test_subjects*.py).

The fixtures are registered for every test by tests/conftest.py.

The test app's ``tests.customer`` subject (tests/jobsapp/jobs.py) covers
its Customer, Order and Review tables.
"""

from __future__ import annotations

import pytest

from django_ultimate_jobs.models import Job, SubjectRequest
from django_ultimate_jobs.subjects import (
    mark_personal_data,
    subject,
    unmark_personal_data,
    unregister_subject,
)
from django_ultimate_jobs.testing import run_jobs
from tests.jobsapp.models import Customer, Order, Review

__all__ = [
    "declare_subject",
    "drain",
    "make_customer",
    "memory_storage",
    "nothing_requested",
    "personal_marks",
    "request_of",
]

MEMORY_STORAGE = {"BACKEND": "django.core.files.storage.InMemoryStorage"}


@pytest.fixture
def memory_storage(settings):
    """``STORAGES["default"]`` in memory; answers the storage."""
    from django.core.files.storage import storages

    settings.STORAGES = {**settings.STORAGES, "default": MEMORY_STORAGE}
    return storages["default"]


@pytest.fixture
def declare_subject():
    """Declare subjects in a test; each is forgotten afterwards."""
    names: list[str] = []

    def make(name: str, tables, **options):
        subject(name=name, tables=tables, **options)
        names.append(name)
        return name

    yield make
    for name in names:
        unregister_subject(name)


@pytest.fixture
def personal_marks():
    """Mark fields in a test; the marks are removed afterwards."""
    made: list[tuple[type, tuple[str, ...]]] = []

    def mark(model, *fields: str) -> None:
        mark_personal_data(model, *fields)
        made.append((model, fields))

    yield mark
    for model, fields in made:
        unmark_personal_data(model, *fields)


def make_customer(n: int = 1, orders: int = 3, reviews: int = 2) -> Customer:
    """A customer with orders and reviews (each value names it: ``Ann <n>``)."""
    created = Customer.objects.create(
        email=f"ann{n}@example.com", name=f"Ann {n}", phone=f"+33 6 00 00 00 {n:02d}"
    )
    Order.objects.bulk_create(
        Order(customer=created, shipping_address=f"{n} rue des Lilas #{i}", total=i)
        for i in range(orders)
    )
    Review.objects.bulk_create(
        Review(author=created, body=f"review {i} by Ann {n}") for i in range(reviews)
    )
    return created


def drain(pg_driver):
    """Run the subject jobs due now (they go to the housekeeping queue)."""
    return run_jobs(queues=["ultimate_jobs"], driver=pg_driver)


def request_of(requested) -> SubjectRequest:
    """The request row an ``export_subject``/``erase_subject`` answer names."""
    return SubjectRequest.objects.get(id=requested.request_id)


def nothing_requested() -> bool:
    """No request row and no subject job: a refusal wrote nothing."""
    return (
        not SubjectRequest.objects.exists()
        and not Job.objects.filter(name__startswith="ultimate_jobs.subject.").exists()
    )
