"""Following a queued job's progress row from a command: a bar on a terminal.

Shared by ``jobs_backfill``, ``jobs_reindex``, ``jobs_export``,
``jobs_import``, ``jobs_subject`` and ``jobs_consumer``. A command queues
a job, then reads its progress row until it ends: :class:`Progress` draws
rows done / total, rate and ETA (a bar on a terminal, a plain line every few
seconds otherwise), :class:`OpenProgress` the same for a stream, whose total
is unknown. :func:`follow_job` is the loop; :func:`follow` is its form for a
keyset pass (a :class:`~django_ultimate_jobs.keyset.models.PassRecord`),
which follows only the run it queued (the row counts while its ``run_id``
is that run's), never the outcome of an earlier one.

Names and errors are stored text: they are printed through
:func:`~django_ultimate_jobs.terminal.printable`, so a control character in
them can neither drive the terminal nor forge a line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.core.management.base import CommandError

from .. import operator
from ..states import LIVE_STATES
from ..terminal import counted, printable

if TYPE_CHECKING:
    from ..drivers.base import Enqueued

__all__ = [
    "BAR_WIDTH",
    "CLEAR",
    "PLAIN_EVERY_S",
    "POLL_S",
    "OpenProgress",
    "Progress",
    "duration",
    "follow",
    "follow_job",
    "pages",
]

POLL_S = 0.5
"""How often a followed job's row is read."""
PLAIN_EVERY_S = 5.0
"""Off a terminal, a progress line at most this often (and one at the end)."""
BAR_WIDTH = 30
CLEAR = "\x1b[K"
"""The terminal's erase-to-end-of-line."""


class Progress:
    """Rows done / total, rate and ETA: a bar on a terminal, lines otherwise."""

    def __init__(self, out: Any, name: str, *, unit: str = "page") -> None:
        self.out = out
        # The bar writes its own \r and erase; the name writes none.
        self.name = printable(name)
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
            f"{self.name}: {row.state}, {counted(row.rows_done, 'row', grouped=True)} in "
            f"{pages(row.pages_done, self.unit)}"
        )

    def _rate(self, row: Any, now: float) -> float:
        assert self.first is not None
        elapsed = now - self.first[0]
        return (row.rows_done - self.first[1]) / elapsed if elapsed > 0 else 0.0

    def _text(self, row: Any, now: float, *, bar: bool) -> str:
        total = row.total or 0
        text = f"{self.name}: {row.rows_done:,}/{total:,} rows"
        if bar and total:
            filled = min(BAR_WIDTH, BAR_WIDTH * row.rows_done // total)
            text = (
                f"{self.name} [{'#' * filled}{' ' * (BAR_WIDTH - filled)}] "
                + text[len(self.name) + 2 :]
            )
        rate = self._rate(row, now)
        text += f", {rate:,.0f} rows/s"
        if rate > 0 and total > row.rows_done:
            text += f", ETA {duration((total - row.rows_done) / rate)}"
        return text


class OpenProgress(Progress):
    """Progress without a total: items handled and the rate, no bar."""

    def _text(self, row: Any, now: float, *, bar: bool) -> str:
        rate = self._rate(row, now)
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


def follow_job(
    progress: Progress,
    job_id: UUID | None,
    read: Callable[[], Any | None],
    ended: Callable[[Any, str | None], bool],
    *,
    shown: Callable[[Any], bool] = lambda row: True,
    gone: Callable[[str | None], str] | None = None,
) -> Any:
    """Show ``read()``'s row until ``ended(row, job state)``, or the job is
    no longer live; answers the last row.

    The job's state is read first: a row read after the job ended is
    final. ``shown(row)`` says whether a row is drawn (a pass that no
    worker has begun has no total yet); ``gone(state)`` words the refusal
    when the job ended with its row not ended.

    Raises:
        CommandError: the job ended (cancelled, removed, dead) with its row
            not ended: the command says so rather than guess.
    """
    while True:
        state = None if job_id is None else operator.job_state(job_id)
        row = read()
        if row is not None:
            if shown(row):
                progress.show(row)
            if ended(row, state):
                progress.end(row)
                return row
        if state not in LIVE_STATES:
            if gone is not None:
                raise CommandError(gone(state))
            if row is not None:
                progress.end(row)
            raise CommandError(
                f"{progress.name}: its job ({job_id}) ended {state or 'removed'} "
                f"without finishing (python manage.py jobs show {job_id})"
            )
        time.sleep(POLL_S)  # the poll interval of following a job


def follow(
    progress: Progress,
    enqueued: Enqueued,
    record: Callable[[], Any],
    *,
    what: str,
    listing: str,
    resume: str = "resume it from its admin page, then follow it again",
) -> Any:
    """Follow the keyset pass ``enqueued`` started until it ends; answers its row.

    ``record()`` reads the pass's row (``None`` before it exists). The row
    counts only while it is this run's (its ``run_id``); a pending one (no
    worker has begun it, so its total is not counted yet: a line would read
    0/0 rows) is not drawn.

    Raises:
        CommandError: the pass failed for good (no live job left to retry
            it), was paused before it was done (``resume`` says how to go
            on: a script must not read a paused pass as success), or its
            job ended without finishing it (cancelled, removed, or the row
            taken by another pass). ``what`` names the pass in the message;
            ``listing`` is the command that lists them.
    """

    def this_run() -> Any:
        row = record()
        return row if row is not None and row.run_id == enqueued.run_id else None

    def ended(row: Any, state: str | None) -> bool:
        return row.state in ("done", "paused") or (
            row.state == "failed" and state not in LIVE_STATES
        )

    def gone(state: str | None) -> str:
        # Cancelled or removed before it ended, or its row was taken by
        # another pass: say so rather than guess.
        return (
            f"{what}: its pass (job {enqueued.id}) ended {state or 'removed'} "
            f"without finishing ({listing})"
        )

    row = follow_job(
        progress,
        enqueued.id,
        this_run,
        ended,
        shown=lambda row: row.state != "pending",
        gone=gone,
    )
    if row.state == "failed":
        raise CommandError(f"{what} failed: {printable(row.error)}")
    if row.state == "paused":
        raise CommandError(
            f"{what} was paused before it was done "
            f"({counted(row.rows_done, 'row', grouped=True)} handled); {resume}"
        )
    return row


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
