"""``run_jobs()``: drain due jobs in a test, through the real worker path.

Each round is one :meth:`Worker.tick`: the real claim statement, the real
executor and the real settle statements, run in the calling thread so that
a test inside a ``TestCase`` transaction sees its own uncommitted rows.
With ``ULTIMATE_JOBS["OUTBOX"]`` on, pending outbox messages are published
first (in this thread, so a ``TestCase`` sees its own staged messages).
Rounds repeat until a claim finds nothing; a job that keeps coming back
due (a retry with no delay, say) stops the loop after ``max_rounds`` with
an assertion suggesting a delay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..drivers import get_driver
from ..drivers.base import JobDriver
from ..registry import registered_jobs
from ..worker.config import WorkerConfig
from ..worker.executor import Execution
from ..worker.runner import Worker

__all__ = ["run_jobs"]

MAX_ROUNDS = 100


def run_jobs(
    *,
    queues: Sequence[str] | None = None,
    driver: JobDriver | None = None,
    max_rounds: int = MAX_ROUNDS,
    claim_batch: int = 64,
    **config: Any,
) -> list[Execution]:
    """Run every job due now; return the executions in the order they ran.

    Args:
        queues: the queues to drain (default: every queue a registered job
            uses, plus ``ULTIMATE_JOBS["QUEUES"]``).
        driver: the driver (default: the installed one). To move time,
            build the driver with a :class:`~django_ultimate_jobs.clock.ManualClock`
            and advance it between calls: delayed jobs and retries fall due.
        max_rounds: stop with an ``AssertionError`` after this many claims.
        claim_batch: rows per claim.
        **config: other :class:`~django_ultimate_jobs.worker.config.WorkerConfig`
            fields.
    """
    from ..conf import jobs_settings
    from ..outbox import publish_pending

    if jobs_settings().outbox:
        # Under TestCase nothing commits, so no commit callback published
        # what the test staged: publish it here, where it is visible.
        publish_pending(driver=driver)
    chosen = tuple(queues) if queues else _all_queues()
    worker = Worker(
        # A burst run: it ends on an empty claim (rows a removed
        # concurrency= left keyed are swept before that, see ClaimLoop.claim).
        WorkerConfig.from_settings(
            queues=chosen, claim_batch=claim_batch, **{"burst": True, **config}
        ),
        driver=driver or get_driver(),
        worker_id="run_jobs",
    )
    executions: list[Execution] = []
    for _ in range(max_rounds):
        ran = worker.tick()
        if not ran:
            return executions
        executions.extend(ran)
    raise AssertionError(
        f"run_jobs() still found due jobs after {max_rounds} rounds: a job keeps "
        "coming back due at once (give its Retry a delay, or raise max_rounds)"
    )


def _all_queues() -> tuple[str, ...]:
    from ..conf import jobs_settings

    names = {handle.queue for handle in registered_jobs()} | set(jobs_settings().queues)
    return tuple(sorted(names))
