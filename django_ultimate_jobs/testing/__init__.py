"""Helpers for users' tests: the memory driver, clocks, the conformance suite.

``run_jobs()`` (drain due jobs through the real executor) lives here too.
"""

from __future__ import annotations

from ..clock import ManualClock

__all__ = ["ManualClock"]
