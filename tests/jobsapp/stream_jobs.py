"""A stream consumer over ``StreamEvent`` rows, for the acceptance tier.

Imported by ``jobs.py`` only when ``UJ_STREAM_JOBS`` is set (and by the
tests that start such workers), so its supervisor task does not fire in
every other test's workers.
"""

from django_ultimate_jobs.consumers import Batch, consumer

from .models import StreamEffect, StreamEvent

NAME = "tests.stream"
PAGE = 100


def fetch(cursor):
    rows = list(
        StreamEvent.objects.filter(id__gt=cursor)
        .order_by("id")
        .values_list("id", flat=True)[:PAGE]
    )
    return Batch(items=rows, cursor=rows[-1] if rows else cursor)


def handle(items):
    StreamEffect.objects.bulk_create(
        StreamEffect(consumer=NAME, event_id=event_id) for event_id in items
    )


stream = consumer(
    name=NAME, fetch=fetch, handle=handle, start=0, cron="* * * * *", run_for="10m"
)
