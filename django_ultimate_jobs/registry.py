"""Job name -> handle: the allowlist the worker runs from.

Nothing is ever imported by a name read from the database: a claimed row
whose name is not registered here is parked, never resolved with
``import_string``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .errors import JobDuplicate

if TYPE_CHECKING:
    from .jobs import JobHandle

__all__ = ["get_job", "register", "registered_jobs", "unregister"]

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
        existing = _jobs.get(handle.name)
        if existing is not None and existing.origin != handle.origin:
            raise JobDuplicate(
                f"two jobs are declared with the name {handle.name!r} "
                f"({existing.origin} and {handle.origin})",
                fix="give one of them another name=...",
                meta={"name": handle.name},
            )
        _jobs[handle.name] = handle


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
