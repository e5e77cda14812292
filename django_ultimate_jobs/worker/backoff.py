"""Idle poll backoff shared by the worker loop (and later the relay).

floor -> (the first empty pass waits the floor) -> doubling -> ceiling; a
wake or a pass that found work resets it. The ceiling is higher while the
LISTEN wake is proven, since a notification will cut the wait short.
"""

from __future__ import annotations

import threading

__all__ = ["IdleBackoff"]

MIN_STEP_S = 0.025


class IdleBackoff:
    """How long to wait before the next claim pass."""

    def __init__(
        self, floor_s: float, ceiling_s: float, woken_ceiling_s: float
    ) -> None:
        self.floor_s = floor_s
        self.ceiling_s = max(ceiling_s, floor_s)
        self.woken_ceiling_s = max(woken_ceiling_s, floor_s)
        self.wake_live = False
        self._current = 0.0
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Work was found or a wake arrived: the next empty pass waits the floor."""
        with self._lock:
            self._current = 0.0

    def next_wait(self) -> float:
        """Return the wait after an empty pass, and grow the next one."""
        ceiling = self.woken_ceiling_s if self.wake_live else self.ceiling_s
        with self._lock:
            if self._current <= 0:
                self._current = self.floor_s
            else:
                self._current = min(
                    max(self._current * 2, self._current + MIN_STEP_S), ceiling
                )
            return self._current
