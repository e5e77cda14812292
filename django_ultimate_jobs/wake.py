"""The in-process wake hub: "a job may be claimable on queue Q".

A hint, never the mechanism: polling guarantees pickup, a wake only makes
the next poll sooner. The LISTEN thread of a worker (Postgres) and the
memory driver (in-process) publish here; worker loops subscribe. An empty
queue name means "any queue".
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["WakeHub", "wake_hub"]


class WakeHub:
    """Fan-out of wake hints to the loops of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: tuple[Callable[[str], None], ...] = ()

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(queue)`` on every hint; returns the unsubscribe."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = tuple(f for f in self._listeners if f is not listener)

        return unsubscribe

    @property
    def active(self) -> bool:
        """Whether anything listens (publishers may skip work when not)."""
        return bool(self._listeners)

    def notify(self, queue: str = "") -> None:
        """Tell every listener that ``queue`` (or any queue) may have work."""
        for listener in self._listeners:
            listener(queue)


wake_hub = WakeHub()
