"""The driver's Lua scripts, each ``lua/lib.lua`` followed by its body.

Each operation is one script (atomic, like one SQL statement), called
with KEYS[1] = the prefix of the slot it works in (:mod:`.layout`).
redis-py sends ``EVALSHA`` and loads a script the server lacks (after a
restart, or on a new cluster node) on the ``NOSCRIPT`` answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SCRIPT_NAMES", "Scripts"]

_LUA = Path(__file__).with_name("lua")
SCRIPT_NAMES = (
    "ack",
    "claim",
    "counters",
    "enqueue",
    "events",
    "fenced",
    "fleet",
    "heartbeat",
    "leases",
    "nack",
    "scan",
    "steps",
    "verbs",
)


def _source(name: str) -> str:
    return (_LUA / f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The registered scripts of one client (``scripts.claim(...)`` etc.)."""

    def __init__(self, client: Any) -> None:
        lib = _source("lib")
        self._by_name = {
            name: client.register_script(f"{lib}\n{_source(name)}")
            for name in SCRIPT_NAMES
        }

    def run(self, name: str, prefix: str, args: list[Any], client: Any) -> Any:
        """Run script ``name`` in the slot of ``prefix`` through ``client``."""
        return self._by_name[name](keys=[prefix], args=args, client=client)
