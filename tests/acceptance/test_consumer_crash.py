"""A stream consumer survives two SIGKILLed workers and handles each item once.

Judged by the tables: each item handled writes one ``StreamEffect`` row in
the transaction that moves the cursor, with no unique key, so an item
handled twice (a batch whose effects committed without its cursor, or the
other way round) would show twice; the cursor ends on the last event.
"""

from __future__ import annotations

import sys

import pytest
from django.db import connection
from django.db.models import Count

from django_ultimate_jobs.consumers import run_consumer, unregister_consumer
from django_ultimate_jobs.models import Consumer, Job
from tests.jobsapp.models import StreamEffect
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

EVENTS = 40_000
NAME = "tests.stream"  # tests/jobsapp/stream_jobs.py: 100 items a batch
DEADLINE_S = 60.0


@pytest.fixture
def stream_jobs():
    """The stream consumer, declared in this process for the test only."""
    from tests.jobsapp import stream_jobs

    yield stream_jobs
    unregister_consumer(NAME)
    sys.modules.pop("tests.jobsapp.stream_jobs", None)


def _items_done() -> int:
    row = Consumer.objects.filter(name=NAME).first()
    return row.items_done if row is not None else 0


def test_a_consumer_survives_two_killed_workers_handling_each_item_once(
    fleet, stream_jobs
):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobsapp_streamevent (payload) "
            "SELECT n FROM generate_series(1, %s) n",
            [EVENTS],
        )
    last = stream_jobs.StreamEvent.objects.latest("id").id
    job_id = run_consumer(NAME).id
    env = {"UJ_STREAM_JOBS": "1"}

    killed_at = []
    for name, items in (("a", 8_000), ("b", 22_000)):
        worker = fleet.start(name=name, env=env)
        wait_until(
            lambda items=items: _items_done() >= items,
            DEADLINE_S,
            0.01,
            message=fleet.logs,
        )
        assert worker.kill() == -9
        killed_at.append(_items_done())
    fleet.start(name="c", env=env)
    wait_until(
        lambda: Job.objects.get(id=job_id).state == "done",
        DEADLINE_S,
        message=fleet.logs,
    )

    assert killed_at[0] < killed_at[1] < EVENTS, killed_at  # both kills mid-run
    handled = StreamEffect.objects.values("event_id").annotate(n=Count("id"))
    assert {row["n"] for row in handled} == {1}  # none twice
    assert handled.count() == EVENTS  # none lost
    row = Consumer.objects.get(name=NAME)
    assert (row.cursor, row.items_done, row.batches_done, row.state) == (
        last,
        EVENTS,
        EVENTS // 100,
        "idle",
    )
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("done", 3)
