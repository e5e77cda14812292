"""Cron schedules in IANA zones: parsing and occurrence arithmetic (pure).

A :class:`Schedule` turns a five-field cron expression and a zone into
instants (aware UTC datetimes). ``croniter`` walks NAIVE wall-clock times,
which is plain calendar arithmetic with no DST surprises; this module then
maps each wall time to the instant(s) it names in the zone:

- a FIXED-TIME cron (minute and hour fields are neither ``*`` nor ``*/n``,
  e.g. ``30 2 * * *``) runs once on the first pass of a repeated hour, and
  a wall time skipped by a spring-forward gap runs at the first instant
  after the gap (03:00 local in Europe/Paris);
- an INTERVAL cron (``*`` or ``*/n`` in the minute or hour field) runs
  through both passes of a repeated hour and has no wall times in a gap,
  so its instants keep their real-time spacing.

Time zones must be IANA names; fixed offsets (``+02:00``, ``Etc/GMT-2``,
``EST``) are refused because they carry no DST rules. ``UTC`` and
``Etc/UTC`` are accepted: they are IANA names and state their intent.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter
from croniter.croniter import CroniterError

from .errors import CronInvalid, TimezoneInvalid

__all__ = ["Schedule", "check_timezone", "parse_schedule"]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIXED_OFFSET = re.compile(r"^(Etc/)?(GMT|UTC)[+-]\d|^[+-]\d|^(EST|MST|HST)$")
# Offsets of one zone differ by at most this much across a transition (the
# largest historical shift is two hours): wall times further apart than
# this cannot swap order once mapped to instants.
_SHIFT = timedelta(hours=3)
_ONE_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated cron expression in an IANA zone."""

    cron: str
    tz: str
    fields: tuple[str, ...] = field(repr=False)
    interval: bool = field(repr=False)
    """Minute or hour is ``*``/``*/n``: both passes of a repeated hour run."""

    @property
    def zone(self) -> tzinfo:
        """The ``ZoneInfo`` of :attr:`tz`."""
        return ZoneInfo(self.tz)

    def after(self, instant: datetime) -> Iterator[datetime]:
        """Every occurrence strictly after ``instant``, ascending (endless)."""
        zone = self.zone
        wall = _wall(instant, zone) - _SHIFT
        walls = croniter(" ".join(self.fields), wall)
        pending: list[datetime] = []
        while True:
            wall = walls.get_next(datetime)
            for candidate in self._instants(wall, zone):
                if candidate > instant:
                    heapq.heappush(pending, candidate)
            # Later wall times map to instants after this bound.
            bound = _instant(wall, zone) - _SHIFT
            while pending and pending[0] <= bound:
                yield heapq.heappop(pending)

    def before(self, instant: datetime) -> Iterator[datetime]:
        """Every occurrence at or before ``instant``, descending (endless)."""
        zone = self.zone
        wall = _wall(instant, zone) + _SHIFT
        walls = croniter(" ".join(self.fields), wall)
        pending: list[tuple[float, datetime]] = []  # newest first
        while True:
            wall = walls.get_prev(datetime)
            for candidate in self._instants(wall, zone):
                if candidate <= instant:
                    heapq.heappush(pending, (-candidate.timestamp(), candidate))
            # Earlier wall times map to instants before this bound.
            bound = _instant(wall, zone) + _SHIFT
            while pending and pending[0][1] >= bound:
                yield heapq.heappop(pending)[1]

    def next_after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after ``instant``."""
        return next(self.after(instant))

    def between(self, start: datetime, end: datetime, *, limit: int) -> list[datetime]:
        """Occurrences in ``(start, end]``, ascending, at most ``limit``."""
        found: list[datetime] = []
        for occurrence in self.after(start):
            if occurrence > end or len(found) >= limit:
                break
            found.append(occurrence)
        return found

    def latest(self, start: datetime, end: datetime, *, limit: int) -> list[datetime]:
        """The last ``limit`` occurrences in ``(start, end]``, ascending."""
        found: list[datetime] = []
        for occurrence in self.before(end):
            if occurrence <= start or len(found) >= limit:
                break
            found.append(occurrence)
        return found[::-1]

    def _instants(self, wall: datetime, zone: tzinfo) -> list[datetime]:
        fold0 = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        fold1 = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if fold0 == fold1:
            return [fold0]
        if _wall(fold0, zone) == wall:
            # A repeated wall time (fall back): fold=0 is the first pass.
            return [fold0, fold1] if self.interval else [fold0]
        # A wall time inside a gap (spring forward) does not exist: fold=0
        # reads it with the offset before the gap, fold=1 with the one after,
        # so the gap ends between fold1 and fold0.
        return [] if self.interval else [_gap_end(fold1, fold0, zone)]


def _instant(wall: datetime, zone: tzinfo) -> datetime:
    return wall.replace(tzinfo=zone).astimezone(UTC)


def _wall(instant: datetime, zone: tzinfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _gap_end(low: datetime, high: datetime, zone: tzinfo) -> datetime:
    """The instant a spring-forward gap ends: the offset changes in (low, high]."""
    after = high.astimezone(zone).utcoffset()
    while high - low > _ONE_MINUTE:
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == after:
            high = middle
        else:
            low = middle
    # Transitions fall on whole minutes in every zone of the database.
    return high.replace(second=0, microsecond=0)


def parse_schedule(cron: object, tz: object) -> Schedule:
    """Validate ``cron`` and ``tz`` and return their :class:`Schedule`.

    Raises:
        CronInvalid: not a five-field cron expression (or a macro such as
            ``@daily``), or one that never fires.
        TimezoneInvalid: missing, not an IANA zone, or a fixed offset.
    """
    zone_name = check_timezone(tz)
    fields = _cron_fields(cron)
    expression = " ".join(fields)
    if not croniter.is_valid(expression):
        raise CronInvalid(
            f"{cron!r} is not a valid cron expression",
            meta={"cron": str(cron)},
        )
    schedule = Schedule(
        cron=str(cron).strip(),
        tz=zone_name,
        fields=fields,
        interval=fields[0].startswith("*") or fields[1].startswith("*"),
    )
    try:
        schedule.next_after(datetime(2000, 1, 1, tzinfo=UTC))
    except CroniterError:
        raise CronInvalid(
            f"{cron!r} never fires (no such date)", meta={"cron": str(cron)}
        ) from None
    return schedule


def _cron_fields(cron: object) -> tuple[str, ...]:
    if not isinstance(cron, str) or not cron.strip():
        raise CronInvalid("cron must be a non-empty string such as '0 9 * * *'")
    text = _MACROS.get(cron.strip().lower(), cron)
    fields = tuple(text.split())
    if len(fields) != 5:
        raise CronInvalid(
            f"{cron!r} has {len(fields)} fields; a cron expression has five "
            "(minute hour day-of-month month day-of-week)",
            meta={"cron": cron},
        )
    return fields


def check_timezone(tz: object) -> str:
    """Return ``tz`` if it is an IANA zone name with rules, else refuse it.

    Raises:
        TimezoneInvalid: missing, unknown, or a fixed offset.
    """
    if not isinstance(tz, str) or not tz.strip():
        raise TimezoneInvalid("tz is required: an IANA zone name")
    if _FIXED_OFFSET.search(tz):
        raise TimezoneInvalid(
            f"{tz!r} is a fixed offset, which carries no DST rules",
            fix="name the place: tz='Europe/Paris' (or 'UTC' for no DST)",
            meta={"tz": tz},
        )
    if tz not in _zone_names():
        raise TimezoneInvalid(f"{tz!r} is not an IANA time zone", meta={"tz": tz})
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise TimezoneInvalid(
            f"{tz!r} is not an IANA time zone", meta={"tz": tz}
        ) from None
    return tz


@cache
def _zone_names() -> frozenset[str]:
    # Reading the zone list walks the tz database once per process.
    return frozenset(available_timezones()) | {"UTC"}
