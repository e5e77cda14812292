"""The loop of a pass: pages as durable steps, a pause looked for, pacing.

Each page is one ``ctx.step.run``: a completed step never runs again, so an
attempt after a crash replays the pages done from storage and goes on with
the first that is not. With ``atomic=True`` the page's writes, its step
record and its progress row commit together: each page's database writes
happen exactly once. The page returns a checkpoint (``cursor``, ``rows``
and whatever its kind counts), never its rows: step outputs are kept for
the whole run.

Pacing is ``rate`` pages a second. A wait under ``DURABLE_PACE_S`` is sat
out in the body (cancellable, the slot held: a durable sleep would cost a
suspension and a re-claim per page); a longer one is a durable
``ctx.step.sleep`` that frees the slot. Pages replayed after a crash do not
wait.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import JobsError

if TYPE_CHECKING:
    from ..context import JobContext

__all__ = [
    "DURABLE_PACE_S",
    "MAX_RATE",
    "MIN_RATE",
    "Pacer",
    "Position",
    "rate_problem",
    "walk",
]

DURABLE_PACE_S = 30.0
"""Waits at least this long between pages are durable sleeps (slot freed)."""
MIN_RATE = 1 / 86400
"""The slowest pace: one page a day (slower would overflow a sleep)."""
MAX_RATE = 1000.0
"""The fastest declared pace: a page a millisecond."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a walk stands: after ``cursor``, at page ``page``, ``rows`` done."""

    cursor: Any
    page: int
    rows: int


def rate_problem(rate: Any, *, optional: bool = False) -> str | None:
    """What is wrong with a declared ``rate`` (pages a second), or ``None``."""
    if rate is None and optional:
        return None
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or not MIN_RATE <= rate <= MAX_RATE
    ):
        return (
            f"rate must be a number of pages/s from {MIN_RATE:.3g} (one a day) "
            f"to {MAX_RATE:g}{' (or None: unpaced)' if optional else ''}, "
            f"got {rate!r}"
        )
    return None


class Pacer:
    """Spaces the starts of pages ``1 / rate`` seconds apart (``None``: unpaced)."""

    def __init__(self, rate: float | None, *, sleep_prefix: str = "pace-") -> None:
        self.interval_s = 0.0 if rate is None else 1.0 / rate
        self.sleep_prefix = sleep_prefix

    def wait(self, ctx: JobContext, page: int, last_ran_at: float | None) -> None:
        """Wait before page ``page``; ``last_ran_at`` is when the page before
        began (monotonic), ``None`` when it was replayed rather than run."""
        interval = self.interval_s
        if interval <= 0:
            return
        if interval >= DURABLE_PACE_S:
            # Always named and always called: a replay meets the same sleeps.
            ctx.step.sleep(f"{self.sleep_prefix}{page}", timedelta(seconds=interval))
            return
        if last_ran_at is not None:
            # The page's own time counts toward the interval.
            wait = interval - (time.monotonic() - last_ran_at)
            if wait > 0.001 and ctx.cancellation.wait(wait):
                ctx.cancellation.raise_if_cancelled()


def walk(
    ctx: JobContext,
    *,
    start: Position,
    batch: int,
    run_page: Callable[[Position], Mapping[str, Any]],
    paused: Callable[[], bool],
    pacer: Pacer,
    malformed: Callable[[Any], JobsError],
    atomic: bool = True,
    step_prefix: str = "page-",
    on_page: Callable[[Position], None] | None = None,
) -> tuple[Position, bool]:
    """Walk pages from ``start`` until one holds fewer than ``batch`` rows.

    ``run_page(position)`` runs inside the step ``<step_prefix><page>`` and
    answers the checkpoint ``{"cursor": ..., "rows": n, ...}``; a page of
    ``n`` rows moves the walk to its cursor. A checkpoint read back from
    storage that is not one is refused with ``malformed(checkpoint)``
    rather than restart from the top.

    Returns:
        Where the walk ended, and whether it stopped because ``paused()``
        said so before a page (the page in flight, if any, finished first).
    """
    position, last_ran_at = start, None
    while True:
        if paused():
            return position, True
        if position.page > start.page:
            pacer.wait(ctx, position.page, last_ran_at)
        began = time.monotonic()
        name = f"{step_prefix}{position.page}"
        out = ctx.step.run(name, run_page, position, atomic=atomic)
        # A replayed page did no work now: the next one need not wait for it.
        last_ran_at = None if ctx.step.replayed[-1:] == [name] else began
        if (
            not isinstance(out, Mapping)
            or isinstance(out.get("rows"), bool)
            or not isinstance(out.get("rows"), int)
            or out["rows"] < 0
        ):
            raise malformed(out)
        count = int(out["rows"])
        if count:
            position = Position(out["cursor"], position.page + 1, position.rows + count)
        if on_page is not None:
            on_page(position)
        if count < batch:
            return position, False
