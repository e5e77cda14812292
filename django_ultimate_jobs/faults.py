"""Named fault points, for crash tests (DBOS's debug triggers, in Python).

Production code calls :func:`fault_point` at commit boundaries; it does
nothing unless the environment variable ``ULTIMATE_JOBS_FAULTS`` arms the
point, e.g. ``ULTIMATE_JOBS_FAULTS="AFTER_CLAIM_COMMIT=exit"``. Actions:
``exit`` (``os._exit(137)``: a crash with nothing flushed), ``raise`` (a
``RuntimeError``), ``stall`` (block for 3600 s: a frozen process).
"""

from __future__ import annotations

import os
import time
from functools import cache

__all__ = [
    "AFTER_CLAIM_COMMIT",
    "AFTER_OUTBOX_COMMIT",
    "AFTER_OUTBOX_PUBLISH",
    "AFTER_STEP_COMMIT",
    "BEFORE_OUTCOME_WRITE",
    "fault_point",
]

AFTER_CLAIM_COMMIT = "AFTER_CLAIM_COMMIT"
"""A claim committed; no body has started."""
BEFORE_OUTCOME_WRITE = "BEFORE_OUTCOME_WRITE"
"""Bodies finished; their settle is about to be written."""
AFTER_STEP_COMMIT = "AFTER_STEP_COMMIT"
"""A durable step's record committed."""
AFTER_OUTBOX_COMMIT = "AFTER_OUTBOX_COMMIT"
"""A transaction that staged outbox messages committed; its callback has
not woken the relay yet."""
AFTER_OUTBOX_PUBLISH = "AFTER_OUTBOX_PUBLISH"
"""A relay published a batch's jobs; it has not marked the messages yet."""


@cache
def _armed() -> dict[str, str]:
    spec = os.environ.get("ULTIMATE_JOBS_FAULTS", "")
    armed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        armed[name.strip()] = action.strip() or "exit"
    return armed


def fault_point(name: str) -> None:
    """Crash, raise or stall here if the environment armed ``name``."""
    action = _armed().get(name) if os.environ.get("ULTIMATE_JOBS_FAULTS") else None
    if action is None:
        return
    if action == "exit":
        os._exit(137)
    if action == "raise":
        raise RuntimeError(f"fault point {name} armed to raise")
    if action == "stall":
        time.sleep(3600)
