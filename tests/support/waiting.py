"""Condition waits with deadlines: the only way tests wait on a worker.

A test never sleeps a fixed time hoping a worker got somewhere; it polls a
condition and fails at a deadline with a message saying what it waited for
and what it last saw (STYLE.md §4.2, §4.4).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["WaitTimeout", "poll_until", "retry_until", "wait_until"]

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold by its deadline."""


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    *,
    message: str | Callable[[], str] | None = None,
) -> T:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Raises:
        WaitTimeout: still falsy after ``timeout`` seconds; the message names
            the condition, the last value seen and ``message`` (a callable is
            called then, e.g. to attach worker logs).
    """
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        # The poll interval of a deadline-bounded condition wait.
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    waited = time.monotonic() - started
    name = getattr(predicate, "__name__", repr(predicate))
    detail = message() if callable(message) else message
    text = f"condition {name} still false after {waited:.2f}s (last value: {last!r})"
    raise WaitTimeout(f"{text}\n{detail}" if detail else text)


def poll_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05
) -> bool:
    """Like :func:`wait_until` but answer False at the deadline instead of raising.

    For pacing a fault schedule: "wait up to N s for completion, else inject
    the next fault".
    """
    try:
        wait_until(predicate, timeout, interval)
    except WaitTimeout:
        return False
    return True


def retry_until(
    action: Callable[[], T],
    timeout: float,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    *,
    give_up: Callable[[], bool] = lambda: False,
) -> T:
    """Call ``action`` until it returns without raising ``retry_on``; its value.

    For a call that fails while a server comes up or a fault heals: at the
    deadline (or once ``give_up()`` holds, e.g. the server process died) the
    last error is raised as it was, not a timeout that hides it.
    """
    failures: list[BaseException] = []
    answer: list[T] = []

    def done() -> bool:
        try:
            answer.append(action())
        except retry_on as error:
            failures[:] = [error]
            return give_up()
        return True

    if not poll_until(done, timeout) or not answer:
        raise failures[-1]
    return answer[0]
