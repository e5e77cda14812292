"""Hide secret values in job input before an operator sees it.

The admin, ``manage.py jobs show`` and ``operator.show`` all print input
through :func:`redact`, so a key declared secret in ``REDACT_KEYS`` never
reaches a screen, a terminal scroll-back or a ``--json`` dump.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["DEPTH_LIMIT", "REDACTED", "redact"]

REDACTED = "[redacted]"
DEPTH_LIMIT = 8
_DEPTH_MARK = "[depth-limit]"


def redact(value: Any, keys: Iterable[str]) -> Any:
    """Return a copy of ``value`` with secret keys' values replaced.

    A key is secret when its lower-cased name contains one of ``keys``
    (lower-cased), so ``stripe_api_key`` is hidden by ``api_key``. Nesting
    deeper than :data:`DEPTH_LIMIT` is cut with a marker rather than walked.
    """
    words = tuple(key.lower() for key in keys)
    return _walk(value, words, 0)


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
