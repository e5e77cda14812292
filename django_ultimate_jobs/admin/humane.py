"""How the admin says times, durations and counts to a person.

One helper per kind, used by every page and list column of the app (the
templates reach them through the ``ultimate_jobs_admin`` template library):

- :func:`humane_time`: a time in the project's time zone (``TIME_ZONE``,
  or the active one) in Django's ``DATETIME_FORMAT``, with the relative
  form beside it ("3 minutes ago") and the exact stored instant on hover;
  the operator verbs answer ISO strings, so it takes those too;
- :func:`humane_ms`: a duration ("250 ms", "1 s", "2 min 30 s");
- :func:`retry_schedule`: the delays a retry policy has left, as "1 s, then
  2 s";
- :func:`counted`: a count with its noun in the right number ("1 job",
  "3 jobs"), through ``ngettext``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext, ngettext

from ..terminal import counted

__all__ = [
    "counted",
    "humane_ms",
    "humane_time",
    "relative",
    "retry_schedule",
    "short_relative",
]

_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))


def _instant(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def relative(moment: datetime, now: datetime | None = None) -> str:
    """``moment`` from ``now``: "12 seconds ago", "3 minutes ago", "in 2 hours"."""
    now = now or timezone.now()
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 60:
        whole = int(abs(seconds))
        text = ngettext("%(n)d second", "%(n)d seconds", whole) % {"n": whole}
    elif seconds > 0:
        text = timesince(moment, now, depth=1)
    else:
        text = timeuntil(moment, now, depth=1)
    text = text.replace("\xa0", " ")  # Django's; the CSS keeps it on one line
    if seconds >= 0:
        return gettext("%(span)s ago") % {"span": text}
    return gettext("in %(span)s") % {"span": text}


def short_relative(moment: datetime, now: datetime | None = None) -> str:
    """``moment`` from ``now`` in one short unit: "12 s ago", "in 59 min"."""
    now = now or timezone.now()
    seconds = (now - moment).total_seconds()
    ms = abs(seconds) * 1000
    size, unit = next(
        ((size, unit) for size, unit in _UNITS if ms >= size), (1000, "s")
    )
    span = f"{int(ms // size)} {unit}"
    return f"{span} ago" if seconds >= 0 else f"in {span}"


def humane_time(value: Any, *, compact: bool = False) -> SafeString | str:
    """A stored time as a person reads it; ``""`` for none.

    ``value`` is a datetime or an ISO string (what the operator verbs
    answer); text that is neither is shown as it is, escaped. ``compact``
    (the jobs list) shows only the short relative form ("3 min ago"), the
    date and the long form on hover.
    """
    if value is None or value == "":
        return ""
    moment = _instant(value)
    if moment is None or timezone.is_naive(moment):
        return str(value)
    local = timezone.localtime(moment)
    shown = formats.date_format(local, "DATETIME_FORMAT")
    ago = relative(moment)
    if compact:
        return format_html(
            '<time class="uj-time" datetime="{}" title="{} ({})">{}</time>',
            moment.isoformat(),
            shown,
            ago,
            short_relative(moment),
        )
    return format_html(
        '<time class="uj-time" datetime="{}" title="{}">{}</time>'
        ' <span class="uj-ago">({})</span>',
        moment.isoformat(),
        local.isoformat(),
        shown,
        ago,
    )


def humane_ms(value: Any) -> str:
    """Milliseconds as "250 ms", "1 s", "1.5 s", "2 min 30 s", "1 h 5 min"."""
    if value is None:
        return ""
    ms = int(value)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.3g} s" if ms % 1000 else f"{ms // 1000} s"
    parts: list[str] = []
    rest = ms
    for size, unit in _UNITS:
        if rest >= size and len(parts) < 2:
            parts.append(f"{rest // size} {unit}")
            rest %= size
        elif parts:
            break  # two adjacent units at most: "1 h 5 min", never "1 h 5 s"
    return " ".join(parts)


def retry_schedule(delays_ms: list[int] | None) -> str:
    """The delays left before each retry: "1 s, then 2 s"; "none"."""
    if not delays_ms:
        return gettext("none")
    return gettext(", then ").join(humane_ms(ms) for ms in delays_ms)
