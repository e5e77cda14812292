"""The claim loop's wake: ``threading.Event``'s four calls, waited on in C.

An idle worker's pickup crosses this wake twice: the LISTEN thread sets it,
and the claim loop returns from it, claims, hands the rows to a slot and
waits on it again. ``threading.Event`` is Python over a ``Condition``: about
ten Python calls to enter a wait (a lock allocated per wait) and as many to
leave it and to set it, each on the pickup's path (the slot that starts the
claimed job waits for the GIL until the claim loop blocks). Here the wait is
one ``SimpleQueue.get``, in C, and a set is one ``put`` (bench/README.md,
pickup).

For one waiting thread (the claim loop), any number of setters. As with
``Event``, a ``set()`` that lands between a ``wait()`` returning and the
``clear()`` after it is absorbed by that ``clear()``: the claim loop claims
after every wake, so nothing is missed. A ``set()`` racing a ``clear()`` can
leave a token behind, which costs one early return of the next ``wait()``
(one empty claim pass), never a lost wake.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time

from .backoff import IdleBackoff

__all__ = ["DUE_KEPT", "ClaimWake", "WakeFlag"]

DUE_KEPT = 10_000
"""Due instants one worker remembers (timed wakes, its own retries); past
that, later ones are found by the idle poll, as before there were any."""


class WakeFlag:
    """Set / is_set / wait / clear, like ``threading.Event``, for one waiter."""

    __slots__ = ("_flag", "_tokens")

    def __init__(self) -> None:
        self._flag = False
        self._tokens: queue.SimpleQueue[bool] = queue.SimpleQueue()

    def set(self) -> None:
        """Wake the waiter (now, or its next wait)."""
        if not self._flag:
            self._flag = True
            self._tokens.put(True)

    def is_set(self) -> bool:
        """Whether a wake is pending."""
        return self._flag

    def wait(self, timeout: float) -> bool:
        """Block until set or ``timeout`` seconds; True if set."""
        if self._flag:
            return True
        try:
            self._tokens.get(timeout=max(timeout, 0.0))  # Event takes < 0 too
        except queue.Empty:
            return self._flag
        return True

    def clear(self) -> None:
        """Forget a pending wake (after a wait, before the work it asked for)."""
        self._flag = False
        while not self._tokens.empty():
            try:
                self._tokens.get_nowait()
            except queue.Empty:
                break


class ClaimWake:
    """What wakes the claim loop, and what a wake resets on the way.

    Shared by the parts that bring rows or make room (the wake hub's NOTIFY,
    the held attempts when a body ran or a settle landed, a stop request):
    the flag the claim loop waits on, its idle backoff, and the instant
    before which a capped worker skips the uncapped claim.
    """

    __slots__ = ("_due", "_due_lock", "backoff", "flag", "uncapped_after")

    def __init__(self, backoff: IdleBackoff) -> None:
        self.flag = WakeFlag()
        self.backoff = backoff
        self.uncapped_after = 0.0
        """Monotonic time before which a capped worker skips the uncapped claim."""
        self._due: list[float] = []
        """A heap of instants (``time.monotonic()``) at which rows fall due."""
        self._due_lock = threading.Lock()

    def due(self, at: float) -> None:
        """A row of these queues falls due at ``at``: the idle wait ends then.

        An instant earlier than every one known wakes the claim loop now,
        which claims and then waits until it; so does one already past (its
        row may have committed after the last claim began).
        """
        past = at <= time.monotonic()
        with self._due_lock:
            due = self._due
            earlier = not due or at < due[0]
            if len(due) < DUE_KEPT:
                heapq.heappush(due, at)
            elif earlier:
                due[0] = at  # the earliest matters most; a later one is lost
        if earlier or past:
            self.flag.set()

    def next_due(self, covered: float) -> float | None:
        """The earliest instant after ``covered`` (forgetting the ones before).

        ``covered``: when the last claim began; rows due by then were claimable.
        """
        if not self._due:
            return None
        with self._due_lock:
            due = self._due
            while due and due[0] <= covered:
                heapq.heappop(due)
            return due[0] if due else None
