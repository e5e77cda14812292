"""Hide secret values in job data before an operator sees it.

One function, :func:`redact`, for every surface that shows structured job
data: the operator API (``operator.show`` and what answers like it, the
outbox listing), so ``manage.py jobs`` (its text and its ``--json``) and the
admin's job page; and the admin's other model pages, which show each JSON
column through :func:`redacted_json`. It covers a job's input, result,
progress, attempt history, its steps' outputs (a ``wait_for_event`` step's
output is the event's payload), an outbox message's input and a backfill's
cursor. A key declared secret in ``REDACT_KEYS`` never reaches a screen, a
terminal scroll-back or a ``--json`` dump; ``jobs outbox-discard
--unredacted`` is the one deliberate exception, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .conf import jobs_settings

__all__ = ["DEPTH_LIMIT", "REDACTED", "redact", "redacted_json"]

REDACTED = "[redacted]"
DEPTH_LIMIT = 8
_DEPTH_MARK = "[depth-limit]"


def redact(value: Any, keys: Iterable[str] | None = None) -> Any:
    """Return a copy of ``value`` with secret keys' values replaced.

    A key is secret when its lower-cased name contains one of ``keys``
    (lower-cased; by default the ``REDACT_KEYS`` setting), so
    ``stripe_api_key`` is hidden by ``api_key``. Nesting deeper than
    :data:`DEPTH_LIMIT` is cut with a marker rather than walked.
    """
    if keys is None:
        keys = jobs_settings().redact_keys
    words = tuple(key.lower() for key in keys)
    return _walk(value, words, 0)


def redacted_json(value: Any) -> str:
    """``value`` redacted, as indented JSON (what a page prints)."""
    return json.dumps(redact(value), indent=2, ensure_ascii=False, default=str)


def _walk(value: Any, words: tuple[str, ...], depth: int) -> Any:
    if isinstance(value, dict | list) and depth >= DEPTH_LIMIT:
        return _DEPTH_MARK
    if isinstance(value, dict):
        return {
            key: REDACTED
            if any(word in str(key).lower() for word in words)
            else _walk(item, words, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_walk(item, words, depth + 1) for item in value]
    return value
