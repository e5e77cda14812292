"""Load the named queries shipped in ``sql/*.sql``.

``queries.sql`` holds the driver's statements; ``maintenance.sql`` those of
the retention sweep and partition maintenance (off the hot path, so kept
apart). A header line ``-- name: <query>`` starts each query; the comment lines that
follow it are its documentation and are kept out of the statement text. A
``-- fragment: <name>`` header starts a piece of SQL that is no statement of
its own: a query that writes ``@<name>`` gets the fragment's text there (the
listing and bulk statements share their optional filters this way).
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import LiteralString, cast

__all__ = ["queries", "query"]

_HEADER = re.compile(r"^-- (name|fragment): ([a-z0-9_]+)\s*$", re.MULTILINE)
# "@name", but not the jsonb operators "@>" and "@@".
_FRAGMENT_USE = re.compile(r"(?<![\w@])@([a-z][a-z0-9_]*)")
_LAYOUT = re.compile(r"\s+")


@cache
def queries(filename: str = "queries.sql") -> dict[str, LiteralString]:
    """Return every named query of ``sql/<filename>``, keyed by name."""
    text = files(__package__).joinpath(f"sql/{filename}").read_text("utf-8")
    parts = _HEADER.split(text)[1:]
    sections = list(zip(parts[::3], parts[1::3], parts[2::3], strict=True))
    fragments = {
        name: _statement(body) for kind, name, body in sections if kind == "fragment"
    }
    named: dict[str, LiteralString] = {}
    for kind, name, body in sections:
        if kind == "fragment":
            continue
        if name in named:
            raise ValueError(f"{filename} names {name!r} twice")
        statement = _FRAGMENT_USE.sub(
            lambda use: fragments[use.group(1)], _statement(body)
        )
        # The file ships inside the package: it is as trusted as source code.
        named[name] = cast(LiteralString, statement)
    return named


def _statement(body: str) -> str:
    # Comment lines (indented ones too) go: the statement is collapsed onto
    # one line below, where a comment would swallow the rest.
    statement = "\n".join(
        line for line in body.splitlines() if not line.lstrip().startswith("--")
    ).strip()
    # Collapse the layout: psycopg caches a statement's placeholder
    # conversion only up to 4,096 bytes, and the claim runs many times a
    # second (no statement has a string literal with repeated spaces).
    return _LAYOUT.sub(" ", statement).rstrip(";")


def query(name: str, filename: str = "queries.sql") -> LiteralString:
    """Return the statement named ``name`` in ``sql/<filename>``."""
    return queries(filename)[name]
