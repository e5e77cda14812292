"""Which ``django.tasks``: Django's own (6.0+), else the ``django-tasks`` backport.

Everything the bridge needs from the framework is imported here once, under
one set of names (the backport spells two exceptions ``...Error``). When
neither is importable the module still imports: :data:`SOURCE` is ``None``,
the names are inert stand-ins, and :func:`require_framework` raises
``ImproperlyConfigured`` naming the package to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "INSTALL_HINT",
    "SOURCE",
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
    "require_framework",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

INSTALL_HINT = (
    "use Django 6.0 or newer (django.tasks), or on Django 5.2 install the "
    "backport: pip install django-tasks, and add 'django_tasks' to INSTALLED_APPS"
)

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
    from django.tasks import task_backends as task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    SOURCE: str | None
else:
    try:
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
        from django.tasks import task_backends as task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import (
            InvalidTask,
            InvalidTaskBackend,
            TaskResultDoesNotExist,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        SOURCE = "django.tasks"
    except ImportError:
        try:
            from django_tasks import task_backends
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import (
                Task,
                TaskContext,
                TaskError,
                TaskResult,
                TaskResultStatus,
            )
            from django_tasks.exceptions import (
                InvalidTaskBackendError as InvalidTaskBackend,
            )
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_enqueued, task_finished, task_started
            from django_tasks.utils import normalize_json

            SOURCE = "django_tasks"
        except ImportError:
            SOURCE = None
            from ._missing import (
                BaseTaskBackend,
                InvalidTask,
                InvalidTaskBackend,
                Task,
                TaskContext,
                TaskError,
                TaskResult,
                TaskResultDoesNotExist,
                TaskResultStatus,
                normalize_json,
                task_backends,
                task_enqueued,
                task_finished,
                task_started,
            )


def require_framework(what: str = "the django.tasks backend") -> None:
    """Raise ``ImproperlyConfigured`` when no ``django.tasks`` is importable."""
    if SOURCE is None:
        raise ImproperlyConfigured(f"{what} needs django.tasks: {INSTALL_HINT}")
