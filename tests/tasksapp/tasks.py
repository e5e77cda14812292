"""Plain ``@task`` functions run by tests/test_tasks_backend.py.

Imported by the tests (and by workers through the bridge's import_string),
never by Django at start-up.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from django_ultimate_jobs import Terminal

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

CALLS: list[str] = []
"""What ran in this process, in order (priority and refusal tests)."""


@task
def add(a, b):
    return a + b


@task
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


@task
def record(label):
    CALLS.append(label)
    return label


@task(queue_name="emails", backend="second")
def send_email(to):
    CALLS.append(f"email:{to}")
    return to


@task(takes_context=True)
def flaky(context, fail_times):
    """Fails on its first ``fail_times`` attempts, then answers its attempt number."""
    if context.attempt <= fail_times:
        raise ValueError(f"failing on attempt {context.attempt}")
    return {
        "attempt": context.attempt,
        "result_id": context.task_result.id,
        "workers": list(context.task_result.worker_ids),
    }


@task(attempts=2, backoff="fixed", delay="10s")
def always_fails():
    raise RuntimeError("always")


@task
def refuses():
    raise Terminal("the card was declined")


@task
async def async_double(x):
    await asyncio.sleep(0)
    return x * 2


@task(takes_context=True)
async def async_context(context):
    await asyncio.sleep(0)
    return context.attempt


@task(timeout="200ms", attempts=1)
async def async_sleeper(seconds):
    await asyncio.sleep(seconds)
    return "woke"


@task(timeout="100ms", attempts=1)
def sync_sleeper(seconds):
    time.sleep(seconds)
    return "woke"


@task(idempotency_key=lambda order_id: f"order:{order_id}")
def keyed(order_id):
    return order_id


@task
def returns_object():
    CALLS.append("returns_object")
    return object()


@task
def complex_return_value():
    """Django's own test task: a value neither JSON nor pickle can hold."""
    CALLS.append("complex_return_value")
    return lambda: True


@task
def returns_nan():
    CALLS.append("returns_nan")
    return {"ratio": float("nan")}


@task
def hang(flag):
    """Block while ``flag`` (a file) exists, deaf to cancellation (as
    django-tasks' ``hang`` task sleeps through a drain). It touches
    ``flag + ".started"`` first, so a test knows the body runs: a claimed
    task's status is RUNNING before its body starts."""
    with open(flag + ".started", "w"):
        pass
    while os.path.exists(flag):
        time.sleep(0.05)  # a task body that ignores cancellation (not a test wait)
    return "released"


def kinds_of(value):
    """``value`` with every leaf replaced by its type's name."""
    if isinstance(value, dict):
        return {key: kinds_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [kinds_of(item) for item in value]
    return type(value).__name__


@task
def kinds(*args, **kwargs):
    """Answers the types it received, and its arguments as it received them."""
    return {"received": kinds_of([list(args), kwargs]), "args": list(args), **kwargs}


@task
def stamp(label):
    """Answers when it ran (this worker process's monotonic clock)."""
    return {"label": label, "ran": time.monotonic_ns()}


@task(attempts=1)
def exits(code):
    """Ends its attempt the way a script ends its process."""
    sys.exit(code)


@task(attempts=1)
def calls_exit():
    exit(5)  # the site builtin, as a script would call it


@task(attempts=1)
def interrupted():
    raise KeyboardInterrupt("the task's own interrupt")


@task(attempts=1)
async def async_exits(code):
    await asyncio.sleep(0)
    sys.exit(code)


def plain_function():
    """Not a task: the bridge must refuse to call it."""
    CALLS.append("plain_function")


@task(backend="immediate")
def on_immediate():
    """Bound to Django's ImmediateBackend: the bridge must refuse it."""
    CALLS.append("on_immediate")
