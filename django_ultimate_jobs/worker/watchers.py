"""What a worker tells its own process of each attempt, without a signal.

``job_started`` and ``job_finished`` are the public way to hear of attempts;
a Django signal's dispatch costs a few microseconds a send, twice a job. The
worker's own instruments (the ``--metrics-port`` counters) sit in the same
process and hold the worker, so they are told directly: a tuple of callables
per event, called in the slot thread (started) and the settle thread
(finished). A watcher that raises is logged and the attempt goes on, as a
signal receiver's failure is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..drivers.base import ClaimedJob
    from .executor import Execution

__all__ = ["AttemptWatchers"]

logger = logging.getLogger("django_ultimate_jobs")

Started = Callable[["ClaimedJob"], None]
Finished = Callable[["Execution"], None]


class AttemptWatchers:
    """The callables told of this worker's attempts (see the module docstring).

    Added and removed from any thread; a call in flight sees the tuple as it
    was when the event began.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.on_started: tuple[Started, ...] = ()
        self.on_finished: tuple[Finished, ...] = ()

    def watch(self, *, started: Started, finished: Finished) -> None:
        """Tell ``started(claimed)`` and ``finished(execution)`` of every attempt."""
        with self._lock:
            self.on_started = (*self.on_started, started)
            self.on_finished = (*self.on_finished, finished)

    def unwatch(self, *, started: Started, finished: Finished) -> None:
        """Stop telling them."""
        with self._lock:
            self.on_started = tuple(f for f in self.on_started if f != started)
            self.on_finished = tuple(f for f in self.on_finished if f != finished)

    def started(self, claimed: ClaimedJob) -> None:
        """An attempt's body is about to run (in its slot thread)."""
        _tell(self.on_started, claimed)

    def finished(self, execution: Execution) -> None:
        """An attempt's settle was written, or given up (in the settle thread)."""
        _tell(self.on_finished, execution)


def _tell(watchers: tuple[Callable[[Any], None], ...], value: Any) -> None:
    for watcher in watchers:
        try:
            watcher(value)
        except Exception:
            logger.exception("jobs.watcher.failed", extra={"watcher": repr(watcher)})
