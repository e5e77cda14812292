"""Capped jobs of the concurrency acceptance tests (tests/acceptance/test_limits_fleet.py).

Declared only where asked (``UJ_LIMIT_JOBS=1`` in a worker's environment,
or an import by the test), so the other acceptance workers keep a registry
without ``concurrency=`` and run the claim they always ran.
"""

from django.db.models.functions import Now

from django_ultimate_jobs import Concurrency, Retry, job

from .models import SlotRun

LIMITS_QUEUE = "limits"


def _run(ctx, key: str, sleep_ms: int) -> None:
    run = SlotRun.objects.create(job_id=ctx.job_id, key=key, worker=ctx.worker_id)
    ctx.cancellation.wait(sleep_ms / 1000)
    SlotRun.objects.filter(pk=run.pk).update(ended_at=Now())
    ctx.cancellation.raise_if_cancelled()


@job(
    name="tests.capped_two",
    queue=LIMITS_QUEUE,
    concurrency=2,
    retry=Retry(attempts=5, delay="100ms"),
)
def capped_two(ctx, *, sleep_ms: int = 50):
    """Record a run under the job's cap of 2."""
    _run(ctx, "capped_two", sleep_ms)


@job(
    name="tests.keyed_one",
    queue=LIMITS_QUEUE,
    concurrency=Concurrency(key=lambda input: f"k{input['key']}", limit=1),
    retry=Retry(attempts=5, delay="100ms"),
)
def keyed_one(ctx, *, key: int, sleep_ms: int = 5):
    """Record a run under a per-key cap of 1."""
    _run(ctx, f"k{key}", sleep_ms)
