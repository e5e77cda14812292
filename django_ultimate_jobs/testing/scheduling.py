"""``run_scheduler()``: one scheduler round in a test, as the sole leader.

Each call builds a fresh :class:`~django_ultimate_jobs.worker.scheduler.Scheduler`
on the installed driver and runs one round, so what persists between calls
is what persists between real rounds: the stored watermarks. The first
call arms new tasks (they fire from their next occurrence on); move a
:class:`~django_ultimate_jobs.clock.ManualClock` past an occurrence and
call again to fire it, then :func:`~django_ultimate_jobs.testing.run_jobs`
to run the jobs it queued.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..crontask import TaskHandle, registered_tasks
from ..drivers import get_driver
from ..drivers.base import JobDriver
from ..worker.scheduler import Fired, Scheduler

__all__ = ["run_scheduler"]

TEST_HOLDER = "run_scheduler"


def run_scheduler(
    *,
    tasks: Sequence[TaskHandle] | None = None,
    driver: JobDriver | None = None,
) -> list[Fired]:
    """Run one scheduler round; answer the occurrences it fired.

    Args:
        tasks: the tasks to consider (default: every declared task).
        driver: the driver (default: the installed one, and its clock).
    """
    chosen = list(tasks) if tasks is not None else registered_tasks()
    scheduler = Scheduler(
        driver=driver or get_driver(), tasks=lambda: chosen, holder=TEST_HOLDER
    )
    scheduler.tick()
    return scheduler.fired
