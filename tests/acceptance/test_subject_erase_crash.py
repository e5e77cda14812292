"""A subject erase survives two SIGKILLed workers and treats each row once.

Judged by the tables: each UPDATE or DELETE of a Customer, Order or Review
row writes one ``Touch`` row in its own transaction (a trigger), so every
row touched exactly once means every page was erased once; the audit
records sum to the rows; each page's step is recorded once; the request
row says done, its key cleared.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count, Sum

from django_ultimate_jobs.models import ErasureRecord, Job, Step, SubjectRequest
from django_ultimate_jobs.subjects import ERASE_JOB, erase_subject
from tests.jobsapp.models import Customer, Order, Review, Touch
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

ORDERS, REVIEWS = 60_000, 2_000
PAGE = 500  # the batch of tests.customer (tests/jobsapp/jobs.py)
DEADLINE_S = 60.0


def _subject() -> Customer:
    customer = Customer.objects.create(
        email="crash@example.com", name="Crash Test", phone="+33 6 12 34 56 78"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobsapp_order (customer_id, shipping_address, total) "
            "SELECT %s, '1 rue des Lilas ' || n, n FROM generate_series(1, %s) n",
            [customer.pk, ORDERS],
        )
        cursor.execute(
            "INSERT INTO jobsapp_review (author_id, body) "
            "SELECT %s, 'review ' || n FROM generate_series(1, %s) n",
            [customer.pk, REVIEWS],
        )
    return customer


def _rows_done(request_id) -> int:
    return SubjectRequest.objects.get(id=request_id).rows_done


def test_an_erase_survives_two_killed_workers_treating_each_row_once(fleet):
    customer = _subject()
    bystander = Customer.objects.create(email="b@example.com", name="B")
    Order.objects.create(customer=bystander, shipping_address="elsewhere")
    requested = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    total = ORDERS + REVIEWS + 1

    killed_at = []
    for name, rows in (("a", 12_000), ("b", 35_000)):
        worker = fleet.start(name=name)
        wait_until(
            lambda rows=rows: _rows_done(requested.request_id) >= rows,
            DEADLINE_S,
            0.01,
            message=fleet.logs,
        )
        assert worker.kill() == -9
        killed_at.append(_rows_done(requested.request_id))
    fleet.start(name="c")
    wait_until(
        lambda: SubjectRequest.objects.get(id=requested.request_id).state == "done",
        DEADLINE_S,
        message=fleet.logs,
    )

    assert killed_at[0] < killed_at[1] < total, killed_at  # both kills mid-erase
    # Every row of the subject touched exactly once; the bystander's never.
    per_row = Touch.objects.values("tbl", "row_id").annotate(n=Count("id"))
    assert {r["n"] for r in per_row} == {1}
    assert dict(
        Touch.objects.values_list("tbl").annotate(n=Count("id")).values_list("tbl", "n")
    ) == {"jobsapp_order": ORDERS, "jobsapp_review": REVIEWS, "jobsapp_customer": 1}
    assert not Review.objects.filter(author=customer).exists()
    assert set(
        Order.objects.filter(customer=customer).values_list(
            "shipping_address", flat=True
        )
    ) == {"erased"}
    assert Order.objects.get(customer=bystander).shipping_address == "elsewhere"
    # The audit sums to the rows; the request is done, its key gone.
    row = SubjectRequest.objects.get(id=requested.request_id)
    assert (row.state, row.rows_done, row.key) == ("done", total, None)
    sums = dict(
        ErasureRecord.objects.filter(request=row, field__in=["*", "shipping_address"])
        .values_list("model")
        .annotate(rows=Sum("rows"))
        .values_list("model", "rows")
    )
    assert sums == {"jobsapp.Order": ORDERS, "jobsapp.Review": REVIEWS}
    job = Job.objects.get(id=requested.job_id)
    assert (job.name, job.state, job.attempt) == (ERASE_JOB, "done", 3)
    pages = Step.objects.filter(run_id=job.run_id, name__contains="-page-")
    assert not pages.exclude(status="completed").exists()
    # 4 + 1 review pages (the last an empty look), 120 + 1 order pages, one
    # customer page, and the sweep's three empty looks: each recorded once.
    assert pages.count() == 5 + 121 + 1 + 3
