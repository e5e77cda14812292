"""Tenant fairness under a flood (issue 14, acceptance "Fairness").

Tenant A enqueues 20,000 jobs, then tenant B 20. With a per-tenant limit,
B's jobs all start within 2 s while A's backlog keeps draining: the claim
skips a full tenant's rows in SQL (job_claim, claim_tenant_open), so B's
rows are reached behind A's. Without the limit B waits behind A's backlog
(20,000 jobs of 20 ms on 8 slots: about 50 s). Judged by the effects table:
each job records its start (the database clock) before its body waits.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.models import Count

from django_ultimate_jobs.models import Job
from tests.jobsapp.jobs import tenant_start
from tests.jobsapp.models import Effect
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FLOOD = 20_000
LATE = 20


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def test_a_flooding_tenant_does_not_starve_another(fleet):
    tenant_start.enqueue_many({"tenant": "a"} for _ in range(FLOOD))
    fleet.start(
        "--concurrency",
        "8",
        env={"UJ_LIMITS": json.dumps({"per_tenant": 4})},
    )
    # A's flood is at the head of the queue and the worker is busy with it.
    wait_until(
        lambda: Effect.objects.filter(kind="start:a").count() >= 50,
        60,
        message=fleet.logs,
    )
    enqueued_at = _db_now()
    late = [
        e.id for e in tenant_start.enqueue_many({"tenant": "b"} for _ in range(LATE))
    ]
    wait_until(
        lambda: Effect.objects.filter(kind="start:b").count() >= LATE,
        60,
        message=fleet.logs,
    )
    b_starts = list(Effect.objects.filter(kind="start:b").values_list("at", flat=True))
    waited = max(b_starts) - enqueued_at
    assert waited.total_seconds() < 2.0, waited
    # A kept running beside B (its backlog drains, it is not paused).
    wait_until(
        lambda: (
            Effect.objects.filter(kind="start:a", at__gt=enqueued_at).count() >= LATE
        ),
        30,
        message=fleet.logs,
    )
    wait_until(
        lambda: Job.objects.filter(id__in=late, state="done").count() == LATE,
        30,
        message=fleet.logs,
    )
    # Skipped and shed rows spend no attempt: every job that finished, A's
    # and B's, finished at attempt 1, and no job started twice.
    assert set(Job.objects.filter(state="done").values_list("attempt", flat=True)) == {
        1
    }
    assert set(Effect.objects.values_list("attempt", flat=True)) == {1}
    # One statement, one snapshot: the worker is still draining A's backlog,
    # and an effect written between two counts made them differ (flaky).
    counted = Effect.objects.aggregate(
        effects=Count("id"), jobs=Count("job_id", distinct=True)
    )
    assert counted["effects"] == counted["jobs"], counted
