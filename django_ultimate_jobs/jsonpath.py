"""Where in a value JSON (or PostgreSQL's jsonb) refuses it: ``order.placed_at``.

:func:`first_refusal` walks a value in document order and answers the path
of the first item that cannot be stored as it is, and why, so a refusal
names the argument (``items[2].at is a value of type datetime``) instead of
only the type. Called on refusal paths only: an accepted value is never
walked.

Paths read like Python access: a key that is an identifier is joined with a
dot (``order.placed_at``), any other string key in brackets
(``tags["a b"]``), a list index in brackets (``items[2]``). A path names
string keys, never values; a string key that cannot be shown (too long, or
holding a control character, a NUL or a lone surrogate) is shown as
``[…]``, and a key of another type by its type (``[<int key>]``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Refusal", "first_refusal", "join_path"]

_SCALARS = (str, int, float, type(None))
_KEY_TYPES = (str, int, float, bool, type(None))
_MAX_KEY_SHOWN = 60
"""A longer key is shown as ``[…]``: a path is a pointer, not a copy."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """The first item JSON refuses: its ``path`` (``""`` for the value itself)."""

    path: str
    problem: str
    """Completes a sentence naming the item: ``"is a value of type datetime"``."""


@dataclass(frozen=True, slots=True)
class _Leave:
    # Marks the end of a container's children on the walk's stack.
    container: int


def first_refusal(value: Any, *, exact: bool = True) -> Refusal | None:
    """The first item of ``value`` (document order) JSON cannot store as it is.

    Refused: a type JSON has no form for, a non-finite float, a string (or
    key) holding a NUL or a lone surrogate, a key of a type JSON refuses, a
    circular reference; with ``exact``, also what a round trip would change
    (a tuple, a non-string key). ``None`` when nothing is found.
    """
    stack: list[tuple[str, Any] | _Leave] = [("", value)]
    inside: set[int] = set()  # the containers on the current path
    seen: set[int] = set()  # a shared container is walked once
    while stack:
        item = stack.pop()
        if isinstance(item, _Leave):
            inside.discard(item.container)
            continue
        path, node = item
        problem = _scalar_problem(node)
        if problem is not None:
            return Refusal(path, problem)
        if isinstance(node, _SCALARS):
            continue
        if not isinstance(node, dict | list | tuple):
            return Refusal(path, f"is a value of type {type(node).__name__}")
        if id(node) in inside:
            return Refusal(path, "refers back to a value that holds it (a cycle)")
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            children: list[tuple[str, Any]] = []
            for key, child in node.items():
                problem = _key_problem(key, exact)
                if problem is not None:
                    return Refusal(path, problem)
                children.append((join_path(path, key), child))
        else:
            if exact and isinstance(node, tuple):
                return Refusal(path, "is a tuple, which JSON reads back as a list")
            children = [(_index(path, i), child) for i, child in enumerate(node)]
        inside.add(id(node))
        stack.append(_Leave(id(node)))
        stack.extend(reversed(children))
    return None


def join_path(path: str, key: Any) -> str:
    """``path`` followed by a dict key.

    A dict key that is not a string is shown by its type only
    (``counts[<int key>]``): such keys are often data (an id, a card
    number), where a string key is usually a field name.
    """
    if isinstance(key, str):
        if key.isidentifier() and len(key) <= _MAX_KEY_SHOWN:
            return f"{path}.{key}" if path else key
        return f"{path}[{_shown(key)}]"
    return f"{path}[<{type(key).__name__} key>]"


def _index(path: str, index: int) -> str:
    return f"{path}[{index}]"


def _shown(key: str) -> str:
    if len(key) > _MAX_KEY_SHOWN or not key.isprintable() or _text_problem(key):
        return "…"
    return json.dumps(key, ensure_ascii=False)


def _scalar_problem(node: Any) -> str | None:
    if isinstance(node, str):
        problem = _text_problem(node)
        return None if problem is None else f"holds {problem}"
    if isinstance(node, float) and not math.isfinite(node):
        return "is a non-finite number, which JSON cannot hold"
    return None


def _key_problem(key: Any, exact: bool) -> str | None:
    if not isinstance(key, _KEY_TYPES):
        return f"has a key of type {type(key).__name__}"
    if isinstance(key, str):
        problem = _text_problem(key)
        return None if problem is None else f"has a key holding {problem}"
    if isinstance(key, float) and not math.isfinite(key):
        return "has a non-finite number as a key"
    if exact:
        return (
            f"has a key of type {type(key).__name__}, which JSON reads back as a string"
        )
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character, which JSON columns cannot store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate, which is not valid UTF-8"
    return None
