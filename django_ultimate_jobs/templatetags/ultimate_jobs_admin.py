"""Filters of the admin's templates: times, durations, retry schedules.

Thin wrappers over :mod:`django_ultimate_jobs.admin.humane`, so a template
and a list column say a time or a duration the same way.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from ..admin.humane import humane_ms, humane_time, retry_schedule

__all__ = ["uj_ms", "uj_retry_schedule", "uj_time"]

register = template.Library()


@register.filter
def uj_time(value: Any) -> SafeString | str:
    """A stored time in the project's time zone, with "3 minutes ago" beside."""
    return humane_time(value)


@register.filter
def uj_ms(value: Any) -> str:
    """Milliseconds as a person reads them ("1.5 s", "2 min 30 s")."""
    return humane_ms(value)


@register.filter
def uj_retry_schedule(value: Any) -> str:
    """The delays a retry policy has left: "1 s, then 2 s"."""
    return retry_schedule(value)
