"""Signals sent whether or not tracing is on.

- ``job_enqueued(sender=JobHandle, job, enqueued)``: after an enqueue returned.
- ``job_started(sender=JobHandle, job, claimed)``: a worker starts an attempt.
- ``job_finished(sender=JobHandle, job, claimed, outcome, landed, error,
  duration_ms)``: an attempt ended (``outcome`` is the executor's outcome
  name, ``duration_ms`` how long its body ran).
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

__all__ = ["JobSignal", "job_enqueued", "job_finished", "job_started"]


class JobSignal(Signal):
    """A :class:`~django.dispatch.Signal` that knows cheaply who listens.

    The worker sends two signals per job. Django's check for "no receiver
    for this sender" builds a weak reference per call; :meth:`listened_for`
    answers from a plain dict keyed by sender class instead, cleared on every
    connect and disconnect. (A receiver that is garbage-collected leaves a
    stale True behind: the send then finds nobody, which is harmless.)
    """

    def __init__(self) -> None:
        super().__init__(use_caching=True)
        self._listened: dict[Any, bool] = {}

    def connect(self, *args: Any, **kwargs: Any) -> None:
        """Connect a receiver (as :meth:`Signal.connect`)."""
        super().connect(*args, **kwargs)
        self._listened.clear()

    def disconnect(self, *args: Any, **kwargs: Any) -> bool:
        """Disconnect a receiver (as :meth:`Signal.disconnect`)."""
        removed = super().disconnect(*args, **kwargs)
        self._listened.clear()
        return removed

    def listened_for(self, sender: Any) -> bool:
        """Whether any live receiver would get a signal sent by ``sender``."""
        try:
            return self._listened[sender]
        except KeyError:
            listened = self._listened[sender] = self.has_listeners(sender)
            return listened


job_enqueued = JobSignal()
job_started = JobSignal()
job_finished = JobSignal()
