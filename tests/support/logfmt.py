"""A log formatter that prints the ``extra`` fields of structured records.

The package logs event names (``jobs.lease.lost``) with the detail in
``extra``; the default formatter drops it. Worker subprocesses of the
acceptance tier use this one so their logs say which job and which worker.
"""

from __future__ import annotations

import logging

__all__ = ["ExtrasFormatter"]

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class ExtrasFormatter(logging.Formatter):
    """``<time> <level> <thread> <message> {extra...}``."""

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        return f"{base} {extras}" if extras else base
