"""Following a queued job's progress row on a terminal, for the commands.

The bar itself is ``jobs_backfill``'s :class:`Progress` (rows done / total,
rate, ETA; a plain line every few seconds off a terminal), reused as is;
:class:`OpenProgress` is its form for a stream, whose total is unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.core.management.base import CommandError

from .. import operator
from ..states import LIVE_STATES
from .commands.jobs_backfill import POLL_S, Progress

__all__ = ["OpenProgress", "Progress", "follow"]


class OpenProgress(Progress):
    """Progress without a total: items handled and the rate, no bar."""

    def _text(self, row: Any, now: float, *, bar: bool) -> str:
        assert self.first is not None
        elapsed = now - self.first[0]
        rate = (row.rows_done - self.first[1]) / elapsed if elapsed > 0 else 0.0
        return f"{self.name}: {row.rows_done:,} items, {rate:,.0f} items/s"

    def end(self, row: Any) -> None:
        """The final line: where the run ended."""
        if self.tty:
            self.out.write("")
        batches = "batch" if row.pages_done == 1 else "batches"
        self.out.write(
            f"{self.name}: {row.state}, {row.rows_done:,} items in "
            f"{row.pages_done:,} {batches}"
        )


def follow(
    progress: Progress,
    job_id: UUID | None,
    read: Callable[[], Any | None],
    ended: Callable[[Any, str | None], bool],
) -> Any:
    """Show ``read()``'s row until ``ended(row, job state)``, or the job is
    no longer live.

    The job's state is read first: a row read after the job ended is
    final. Answers the last row.

    Raises:
        CommandError: the job ended (cancelled, removed, dead) with its row
            not ended: the command says so rather than guess.
    """
    while True:
        state = None if job_id is None else operator.job_state(job_id)
        row = read()
        if row is not None:
            progress.show(row)
            if ended(row, state):
                progress.end(row)
                return row
        if state not in LIVE_STATES:
            if row is not None:
                progress.end(row)
            raise CommandError(
                f"{progress.name}: its job ({job_id}) ended {state or 'removed'} "
                "without finishing (python manage.py jobs show "
                f"{job_id})"
            )
        time.sleep(POLL_S)  # the poll interval of following a job
