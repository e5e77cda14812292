"""Job name -> handle: the allowlist the worker runs from.

Nothing is ever imported by a name read from the database: a claimed row
whose name is not registered here is parked, never resolved with
``import_string``.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Protocol, TypeVar

from .errors import JobDuplicate, JobUnknown

if TYPE_CHECKING:
    from .jobs import JobHandle

__all__ = [
    "discovered_modules",
    "get_job",
    "put_unique",
    "register",
    "registered_jobs",
    "unknown_job",
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


_MODULES_SHOWN = 20
"""An unknown job's error lists at most this many modules (then a count)."""


def discovered_modules() -> list[str]:
    """The ``<app>.jobs`` modules of ``INSTALLED_APPS`` this process imported.

    Autodiscovery (``AppConfig.ready()``) imports the ``jobs`` module of
    every installed app that has one, and of no other package.
    """
    from django.apps import apps

    if not apps.ready:
        return []
    # This app's own ``jobs`` module is the @job API, not declarations.
    names = (
        f"{config.name}.jobs"
        for config in apps.get_app_configs()
        if config.name != __package__
    )
    return [name for name in names if name in sys.modules]


def unknown_job(name: str) -> JobUnknown:
    """The error for a job ``name`` nothing registered, saying where it looked.

    A newcomer's usual cause is an app with a ``jobs.py`` that is not in
    ``INSTALLED_APPS``: its module was never imported, so the cause lists
    the modules that were.
    """
    found = discovered_modules()
    if not found:
        where = "no installed app has a jobs module"
    else:
        shown = ", ".join(found[:_MODULES_SHOWN])
        more = len(found) - _MODULES_SHOWN
        where = f"the jobs modules it imported are {shown}"
        if more > 0:
            where += f" and {more} more"
    return JobUnknown(
        f"no job registered as {name!r:.200} in this worker; {where} (only the "
        "jobs.py of an app in INSTALLED_APPS is imported)",
        fix="declare the job in <app>/jobs.py of an app listed in INSTALLED_APPS "
        "(check the name= too), or deploy the release that declares it there",
        meta={"job": name, "modules": found},
    )
