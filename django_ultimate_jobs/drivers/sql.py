"""Load the named queries shipped in ``sql/*.sql``.

``queries.sql`` holds the driver's statements; ``maintenance.sql`` those of
the retention sweep and partition maintenance (off the hot path, so kept
apart). A header line ``-- name: <query>`` starts each query; the comment lines that
follow it are its documentation and are kept out of the statement text.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import LiteralString, cast

__all__ = ["queries", "query"]

_HEADER = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)
_LAYOUT = re.compile(r"\s+")


@cache
def queries(filename: str = "queries.sql") -> dict[str, LiteralString]:
    """Return every named query of ``sql/<filename>``, keyed by name."""
    text = files(__package__).joinpath(f"sql/{filename}").read_text("utf-8")
    parts = _HEADER.split(text)[1:]
    named: dict[str, LiteralString] = {}
    for name, body in zip(parts[::2], parts[1::2], strict=True):
        # Comment lines (indented ones too) go: the statement is collapsed
        # onto one line below, where a comment would swallow the rest.
        statement = "\n".join(
            line for line in body.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if name in named:
            raise ValueError(f"{filename} names {name!r} twice")
        # Collapse the layout: psycopg caches a statement's placeholder
        # conversion only up to 4,096 bytes, and the claim runs many times a
        # second (no statement has a string literal with repeated spaces).
        statement = _LAYOUT.sub(" ", statement)
        # The file ships inside the package: it is as trusted as source code.
        named[name] = cast(LiteralString, statement.rstrip(";"))
    return named


def query(name: str, filename: str = "queries.sql") -> LiteralString:
    """Return the statement named ``name`` in ``sql/<filename>``."""
    return queries(filename)[name]
