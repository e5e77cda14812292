"""Following a pass from a command: a bar on a terminal, lines otherwise.

Shared by ``jobs_backfill``, ``jobs_reindex``, ``jobs_export`` and
``jobs_import``. A command queues a pass, then reads its progress row
(a :class:`~django_ultimate_jobs.keyset.models.PassRecord`) until it ends;
only the run it queued is followed (the row is read while its ``run_id``
is that run's), never the outcome of an earlier one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError

from ..states import LIVE_STATES

if TYPE_CHECKING:
    from ..drivers.base import Enqueued

__all__ = [
    "BAR_WIDTH",
    "CLEAR",
    "PLAIN_EVERY_S",
    "POLL_S",
    "Progress",
    "duration",
    "follow",
    "pages",
]

POLL_S = 0.5
"""How often a followed pass's row is read."""
PLAIN_EVERY_S = 5.0
"""Off a terminal, a progress line at most this often (and one at the end)."""
BAR_WIDTH = 30
CLEAR = "\x1b[K"
"""The terminal's erase-to-end-of-line."""


class Progress:
    """Rows done / total, rate and ETA: a bar on a terminal, lines otherwise."""

    def __init__(self, out: Any, name: str, *, unit: str = "page") -> None:
        self.out = out
        self.name = name
        self.unit = unit
        self.tty = bool(out.isatty())
        self.first: tuple[float, int] | None = None
        self.last_line = -PLAIN_EVERY_S

    def show(self, row: Any) -> None:
        """Draw the bar, or print a line if the last one is old enough."""
        now = time.monotonic()
        if self.first is None or row.rows_done < self.first[1]:
            self.first = (now, row.rows_done)
        if self.tty:
            # Erase what a longer earlier line left to the right.
            self.out.write("\r" + self._text(row, now, bar=True) + CLEAR, ending="")
            self.out.flush()
        elif now - self.last_line >= PLAIN_EVERY_S:
            self.last_line = now
            self.out.write(self._text(row, now, bar=False))

    def end(self, row: Any) -> None:
        """The final line: where the pass ended."""
        if self.tty:
            self.out.write("")
        self.out.write(
            f"{self.name}: {row.state}, {row.rows_done:,} rows in "
            f"{pages(row.pages_done, self.unit)}"
        )

    def _text(self, row: Any, now: float, *, bar: bool) -> str:
        total = row.total or 0
        text = f"{self.name}: {row.rows_done:,}/{total:,} rows"
        if bar and total:
            filled = min(BAR_WIDTH, BAR_WIDTH * row.rows_done // total)
            text = (
                f"{self.name} [{'#' * filled}{' ' * (BAR_WIDTH - filled)}] "
                + text[len(self.name) + 2 :]
            )
        assert self.first is not None
        elapsed = now - self.first[0]
        rate = (row.rows_done - self.first[1]) / elapsed if elapsed > 0 else 0.0
        text += f", {rate:,.0f} rows/s"
        if rate > 0 and total > row.rows_done:
            text += f", ETA {duration((total - row.rows_done) / rate)}"
        return text


def follow(
    progress: Progress,
    enqueued: Enqueued,
    record: Callable[[], Any],
    *,
    what: str,
    listing: str,
) -> Any:
    """Follow the pass ``enqueued`` started until it ends; answers its row.

    ``record()`` reads the pass's row (``None`` before it exists). The row
    counts only while it is this run's (its ``run_id``).

    Raises:
        CommandError: the pass failed for good (no live job left to retry
            it), or its job ended without finishing it (cancelled,
            removed, or the row taken by another pass). ``what`` names the
            pass in the message; ``listing`` is the command that lists them.
    """
    from ..models import Job

    while True:
        # The job first: a row read after the job has ended is final.
        job_state = (
            Job.objects.filter(id=enqueued.id).values_list("state", flat=True).first()
        )
        live = job_state in LIVE_STATES
        row = record()
        if row is not None and row.run_id != enqueued.run_id:
            row = None
        if row is not None:
            progress.show(row)
            if row.state in ("done", "paused") or (row.state == "failed" and not live):
                progress.end(row)
                if row.state == "failed":
                    raise CommandError(f"{what} failed: {row.error}")
                return row
        if not live:
            # Cancelled or removed before it ended, or its row was taken by
            # another pass: say so rather than guess.
            raise CommandError(
                f"{what}: its pass (job {enqueued.id}) ended "
                f"{job_state or 'removed'} without finishing ({listing})"
            )
        time.sleep(POLL_S)  # the poll interval of following a pass


def pages(count: int, unit: str = "page") -> str:
    """``1 page``, ``12 pages``."""
    return f"{count:,} {unit}" if count == 1 else f"{count:,} {unit}s"


def duration(seconds: float) -> str:
    """``14s``, ``3m05s``, ``2h07m``."""
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
