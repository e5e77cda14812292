"""Partition periods: pure date arithmetic over UTC days, weeks and months."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Literal

__all__ = ["INTERVALS", "Interval", "period_start", "shift"]

Interval = Literal["day", "week", "month"]
INTERVALS: tuple[Interval, ...] = ("day", "week", "month")


def period_start(day: date, interval: Interval) -> date:
    """The first day of the period holding ``day`` (weeks start on Monday)."""
    if interval == "day":
        return day
    if interval == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def shift(start: date, interval: Interval, periods: int) -> date:
    """The start of the period ``periods`` away from the one starting at ``start``."""
    if interval == "day":
        return start + timedelta(days=periods)
    if interval == "week":
        return start + timedelta(weeks=periods)
    months = start.year * 12 + start.month - 1 + periods
    return date(months // 12, months % 12 + 1, 1)
