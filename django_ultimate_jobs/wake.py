"""The in-process wake hub: "a job may be claimable on queue Q".

A hint, never the mechanism: polling guarantees pickup, a wake only makes
the next poll sooner. The LISTEN thread of a worker (Postgres) and the
memory driver (in-process) publish here; worker loops subscribe. An empty
queue name means "any queue".

A timed hint says when a row falls due: ``"<queue>\t<unix ms>"`` (a tab
never occurs in a queue name: names are printable). The enqueue of a row due
later sends one (``job_enqueue_answer``), so an idle worker sleeps until
then instead of finding it on a poll; :func:`split_hint` reads it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["WakeHub", "instant_of", "split_hint", "wake_hub"]

_TAB = "\t"


def instant_of(unix_s: float) -> float:
    """The ``time.monotonic()`` instant of the wall-clock time ``unix_s``."""
    return time.monotonic() + (unix_s - time.time())


def split_hint(hint: str) -> tuple[str, float | None]:
    """A hint's queue, and for a timed one its due instant (``time.monotonic()``).

    A timed hint whose time does not parse is read as a plain one.
    """
    if _TAB not in hint:
        return hint, None
    queue, _, unix_ms = hint.partition(_TAB)
    try:
        return queue, instant_of(int(unix_ms) / 1000)
    except ValueError:
        return queue, None


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
