"""Prepared statements on Django's own psycopg connections.

The Postgres driver and the ledger's book run their named queries through
a server-binding cursor on the connection Django opened, with
``prepare=True``, so PostgreSQL plans each statement once per connection.
Django turns psycopg's automatic preparing off (``prepare_threshold`` is
``None``), and with it an explicit ``prepare=True`` too: both set the
threshold to :data:`EXPLICIT_PREPARE_ONLY` instead.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXPLICIT_PREPARE_ONLY", "prepare_explicit_only"]

EXPLICIT_PREPARE_ONLY = 2**31 - 1
"""A ``prepare_threshold`` no statement reaches: Django's own queries stay
unprepared, as Django configured them, and only ``prepare=True`` prepares."""


def prepare_explicit_only(raw: Any) -> None:
    """Let ``prepare=True`` prepare on the psycopg connection ``raw``.

    Only a connection Django left unprepared (``None``) is changed: a
    threshold the project set in ``OPTIONS`` is its own.
    """
    if raw.prepare_threshold is None:
        raw.prepare_threshold = EXPLICIT_PREPARE_ONLY
