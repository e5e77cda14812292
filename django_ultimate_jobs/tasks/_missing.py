"""Inert stand-ins for ``django.tasks`` names when no framework is installed.

They let :mod:`django_ultimate_jobs.backends` import cleanly on Django 5.2
without the backport; the backend refuses to be built (``ImproperlyConfigured``
naming the package to install), so nothing here is ever used for real.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def _refuse() -> ImproperlyConfigured:
    from .compat import INSTALL_HINT

    return ImproperlyConfigured(f"django.tasks is not installed: {INSTALL_HINT}")


class BaseTaskBackend:
    """Refuses to be built: there is no ``django.tasks`` to back it."""

    task_class: Any = None

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        raise _refuse()


class Task:
    """Stand-in for ``django.tasks.Task`` (never instantiated)."""


class TaskContext:
    """Stand-in for ``django.tasks.TaskContext``."""


class TaskError:
    """Stand-in for ``django.tasks.base.TaskError``."""


class TaskResult:
    """Stand-in for ``django.tasks.TaskResult``."""


class TaskResultStatus(StrEnum):
    """The four statuses, so module-level tables can be built."""

    READY = "READY"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    SUCCESSFUL = "SUCCESSFUL"


class InvalidTask(Exception):
    """Stand-in for ``django.tasks.exceptions.InvalidTask``."""


class InvalidTaskBackend(ImproperlyConfigured):
    """Stand-in for ``django.tasks.exceptions.InvalidTaskBackend``."""


class TaskResultDoesNotExist(Exception):
    """Stand-in for ``django.tasks.exceptions.TaskResultDoesNotExist``."""


def normalize_json(obj: Any) -> Any:
    """Refuse: there is no framework to normalise for."""
    raise _refuse()


class _NoBackends:
    def __getitem__(self, alias: str) -> Any:
        raise _refuse()

    def all(self) -> list[Any]:
        return []


task_backends: Any = _NoBackends()
task_enqueued = Signal()
task_started = Signal()
task_finished = Signal()
