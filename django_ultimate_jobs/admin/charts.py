"""The dashboard's charts: bar geometry for server-rendered inline SVG.

Each chart is one value per slot of a :class:`~..timeseries.Series` (an
outcome count, or the mean pickup latency) drawn as bars in a fixed
viewBox the page scales to its width. Colours come from CSS classes
(``_chart_styles.html``), so the light and dark admin themes both apply;
every bar carries its value in ``data-value`` and a ``<title>``, and the
page repeats the numbers in a table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from django.utils import timezone

from ..timeseries import Series, Slot

__all__ = ["Bar", "Chart", "Tick", "chart", "duration_text"]

WIDTH, HEIGHT = 640, 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 8, 10, 22
_PLOT_W, _PLOT_H = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM


@dataclass(frozen=True, kw_only=True, slots=True)
class Bar:
    """One slot's bar (absent slots have none; a zero count has height 0)."""

    x: float
    y: float
    width: float
    height: float
    value: int
    start: str
    """The slot's start, ISO 8601 UTC (``data-start``)."""
    title: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Tick:
    """An axis label at ``x``/``y`` in viewBox units."""

    x: float
    y: float
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Chart:
    """What ``_chart.html`` draws for one measure."""

    key: str
    title: str
    desc: str
    bars: tuple[Bar, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    empty: str | None
    """The note drawn over an empty plot (``None`` when there is data)."""
    width: int = WIDTH
    height: int = HEIGHT
    left: int = _LEFT
    right: int = WIDTH - _RIGHT
    baseline: int = _TOP + _PLOT_H
    middle_x: float = _LEFT + _PLOT_W / 2
    middle_y: float = _TOP + _PLOT_H / 2


def duration_text(ms: int) -> str:
    """``250 ms``, ``1.5 s``, ``12 s``, ``3.2 min``."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 10_000:
        return f"{ms / 1000:.1f} s"
    if ms < 120_000:
        return f"{round(ms / 1000)} s"
    return f"{ms / 60_000:.1f} min"


def _nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * power >= value:
            return factor * power
    return 10 * power  # pragma: no cover (the loop always answers)


def _clock(slot: Slot) -> str:
    return timezone.localtime(slot.start).strftime("%H:%M")


def chart(
    series: Series,
    key: str,
    *,
    title: str,
    value: Callable[[Slot], int | None],
    describe: Callable[[Slot, int], str],
    summary: str,
    axis: Callable[[int], str] = str,
    empty: str,
) -> Chart:
    """One measure of ``series`` as bars: ``value`` per slot (``None``: no bar).

    ``describe(slot, value)`` is a bar's tooltip; ``summary`` opens the
    chart's ``<desc>``; ``axis`` formats the y-axis labels; ``empty`` is
    drawn when no slot has a value above zero.
    """
    values = [value(slot) for slot in series.slots]
    peak = max((v for v in values if v is not None), default=0)
    top = _nice_ceiling(peak)
    band = _PLOT_W / len(values)
    gap = min(2.0, band * 0.25)
    bars = []
    for index, (slot, count) in enumerate(zip(series.slots, values, strict=True)):
        if count is None:
            continue
        height = count / top * _PLOT_H
        if count > 0:
            height = max(height, 1.0)  # a 1 beside a 10000 still shows
        bars.append(
            Bar(
                x=round(_LEFT + index * band + gap / 2, 2),
                y=round(_TOP + _PLOT_H - height, 2),
                width=round(band - gap, 2),
                height=round(height, 2),
                value=count,
                start=slot.start.isoformat(),
                title=f"{_clock(slot)}: {describe(slot, count)}",
            )
        )
    # The first and last labels sit flush with the plot's edges (the
    # template anchors them start and end), the middle one under its bar.
    last = len(values) - 1
    x_ticks = tuple(
        Tick(x=round(x, 2), y=HEIGHT - 6, text=_clock(series.slots[i]))
        for i, x in (
            (0, _LEFT),
            (last // 2, _LEFT + (last // 2 + 0.5) * band),
            (last, WIDTH - _RIGHT),
        )
    )
    # Gridlines at 0, the top and a whole value near the middle (2 of 5).
    y_ticks = tuple(
        Tick(
            x=_LEFT - 6,
            y=round(_TOP + _PLOT_H * (1 - level / top), 2),
            text=axis(level),
        )
        for level in sorted({0, top // 2, top})
    )
    busiest = max(range(len(values)), key=lambda i: values[i] or 0)
    desc = (
        summary
        if peak == 0
        else f"{summary} Highest {series.span.per}: "
        f"{_clock(series.slots[busiest])} with {axis(peak)}."
    )
    return Chart(
        key=key,
        title=f"{title} per {series.span.per}, {series.span.label}",
        desc=desc,
        bars=tuple(bars),
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        empty=empty if peak == 0 else None,
    )
