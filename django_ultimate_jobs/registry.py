"""Job name -> handle: the allowlist the worker runs from.

Nothing is ever imported by a name read from the database: a claimed row
whose name is not registered here is parked, never resolved with
``import_string``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol, TypeVar

from .errors import JobDuplicate

if TYPE_CHECKING:
    from .jobs import JobHandle

__all__ = [
    "get_job",
    "put_unique",
    "register",
    "registered_jobs",
    "unregister",
]

_lock = threading.Lock()
_jobs: dict[str, JobHandle] = {}


def register(handle: JobHandle) -> None:
    """Register ``handle`` under its name.

    Re-running the same declaration (a module imported twice, as the
    autoreloader and some test runners do) replaces it quietly; another
    function under a taken name is refused.

    Raises:
        JobDuplicate: another declaration holds the name.
    """
    with _lock:
        put_unique(_jobs, handle, "jobs")


class _Declared(Protocol):
    name: str
    origin: str


D = TypeVar("D", bound=_Declared)


def put_unique(table: dict[str, D], declared: D, kind: str) -> None:
    """Store ``declared`` under its name, refusing a name another origin holds.

    The same declaration run again (a module imported twice, as the
    autoreloader and some test runners do) has the same origin and replaces
    the first quietly.

    Raises:
        JobDuplicate: another declaration holds the name.
    """
    existing = table.get(declared.name)
    if existing is not None and existing.origin != declared.origin:
        raise JobDuplicate(
            f"two {kind} are declared with the name {declared.name!r} "
            f"({existing.origin} and {declared.origin})",
            fix="give one of them another name=...",
            meta={"name": declared.name},
        )
    table[declared.name] = declared


def unregister(name: str) -> None:
    """Forget a job (tests that declare jobs on the fly)."""
    with _lock:
        _jobs.pop(name, None)


def get_job(name: str) -> JobHandle | None:
    """Return the handle registered under ``name``, if any."""
    return _jobs.get(name)


def registered_jobs() -> list[JobHandle]:
    """Every registered handle, sorted by name in code-unit order."""
    with _lock:
        return [_jobs[name] for name in sorted(_jobs)]
