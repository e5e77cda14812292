"""Print stored text on an operator's terminal without letting it drive it.

Job errors, step names, lease keys, tenant ids, outbox fields: text the
commands print comes from users' input as often as not (an exception
message quotes what it was given). Printed raw, ``\\x1b]0;...\\x07`` retitles
the terminal, ``\\x1b[31m`` recolours it, and a newline forges a row of the
listing. Every command prints such text through :func:`printable` (one value)
or :func:`printable_tree` (an answer, before it is formatted), which show
each control character escaped and readable (``\\x1b``, ``\\n``); job data
printed as JSON goes through :func:`printable_json`. ``--json``
output is left alone: JSON escapes control characters itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.utils.translation import ngettext

__all__ = ["counted", "escape_json", "printable", "printable_json", "printable_tree"]

# C0 (newline and tab included: a row is one line), DEL, C1 (0x9b is an
# 8-bit CSI), the Unicode line and paragraph separators, and the
# bidirectional overrides and isolates that reorder what a line shows; and
# lone surrogates (a surrogateescape-decoded file name), which no stream can
# encode.
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """``text`` with every control character escaped as Python writes it."""
    return _CONTROL.sub(_escaped, text)


def printable_tree(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists) with every string :func:`printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {
            printable_tree(key): printable_tree(item) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [printable_tree(item) for item in value]
    return value


def printable_json(value: Any) -> str:
    """``value`` as one line of JSON, each control character escaped.

    ``json.dumps`` escapes C0 (``\\u001b``) but leaves C1, DEL and the
    separators raw; those get the same ``\\uXXXX`` form, so the line stays
    valid JSON.
    """
    return escape_json(
        json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    )


def escape_json(text: str) -> str:
    """JSON text with each control character left raw by ``json.dumps`` as ``\\uXXXX``.

    Still the same JSON (those characters occur only inside strings), and
    one line a terminal shows as it is.
    """
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def counted(
    count: int, singular: str, plural: str | None = None, *, grouped: bool = False
) -> str:
    """``count`` and its noun in the right number: "1 job", "3 jobs";
    ``grouped``: thousands grouped, as the commands print counts ("1,200
    rows"). The admin's pages and the commands both say how many with it."""
    noun = ngettext(singular, plural or f"{singular}s", count)
    return f"{count:,} {noun}" if grouped else f"{count} {noun}"
