"""The worker's state and its stop: what every part reads instead of the worker.

``idle`` (built; :meth:`Worker.tick` never leaves it) -> ``running`` (the
threaded loop) -> ``draining`` (a stop was requested) -> ``stopped``. A stop
request fixes three instants from the drain budget, each read by the part
that acts on it: the cut-off (the keeper cancels running bodies' tokens with
``X_DRAINING``), the hand-back (the keeper hands every attempt not settled
back, uncounted) and the deadline (the settle loop stops retrying a write,
the root stops waiting for held work).
"""

from __future__ import annotations

import logging
import threading
import time

from ..context import CancellationToken
from ..errors import Draining, JobsError
from .wakeflag import ClaimWake

__all__ = ["DRAIN_CANCEL_MARGIN_S", "Lifecycle"]

logger = logging.getLogger("django_ultimate_jobs")

DRAIN_CANCEL_MARGIN_S = 2.0


class Lifecycle:
    """One worker's state, its stop request and the drain's instants."""

    def __init__(
        self, *, worker_id: str, shutdown_deadline_ms: int, wake: ClaimWake
    ) -> None:
        self.worker_id = worker_id
        self.state = "idle"
        self.exit_reason: str | None = None
        self.drain_token = CancellationToken()
        """Cancelled at the drain's cut-off (what a body may watch)."""
        self.refused: JobsError | None = None
        """What stopped the worker before it could serve (its tables missing)."""
        self.deadline_at: float | None = None
        self.cutoff_at: float | None = None
        self.handback_at: float | None = None
        self._shutdown_deadline_s = shutdown_deadline_ms / 1000
        self._wake = wake
        self._lock = threading.Lock()

    def start(self) -> None:
        """The threaded loop runs from now on (unless a stop came first)."""
        if self.state == "idle":
            self.state = "running"

    def request_stop(
        self, deadline_s: float | None = None, reason: str = "signal"
    ) -> None:
        """Stop claiming now; running jobs get until the deadline (drain)."""
        with self._lock:
            if self.state in ("draining", "stopped"):
                return
            self.state = "draining"
            self.exit_reason = reason
            budget = self._shutdown_deadline_s if deadline_s is None else deadline_s
            now = time.monotonic()
            margin = min(DRAIN_CANCEL_MARGIN_S, budget / 2)
            self.deadline_at = now + budget
            self.cutoff_at = self.deadline_at - margin
            self.handback_at = self.deadline_at - margin / 2
        logger.info(
            "jobs.worker.draining",
            extra={"worker_id": self.worker_id, "deadline_s": budget},
        )
        self._wake.flag.set()

    def refuse(self, error: JobsError) -> None:
        """Stop: the worker cannot serve at all (``error`` says why and what to do)."""
        self.refused = error
        self.request_stop(reason="refused")

    def cut_off(self, now: float) -> Draining | None:
        """At the cut-off, once: cancel the drain token; answer its reason."""
        if self.cutoff_at is None or now < self.cutoff_at or self.drain_token.is_set():
            return None
        logger.info("jobs.worker.drain-cancelling", extra={"worker_id": self.worker_id})
        reason = Draining(f"worker {self.worker_id} is shutting down")
        self.drain_token.cancel(reason)
        return reason

    def hand_back_due(self, now: float) -> bool:
        """Whether the hand-back instant has come (True once)."""
        if self.handback_at is not None and now >= self.handback_at:
            self.handback_at = None
            return True
        return False

    def may_keep_trying(self) -> bool:
        """After the stop, whether the drain deadline is still ahead."""
        return self.deadline_at is not None and time.monotonic() < self.deadline_at

    def stopped(self) -> None:
        """Every thread has been stopped."""
        self.state = "stopped"
