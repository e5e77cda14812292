"""Where the Redis driver keeps what: one hash tag per queue, and a few more.

Every state change is one Lua script over the keys of ONE hash slot, so
the driver runs unchanged on Redis Cluster. The slots (``P`` is
``ULTIMATE_JOBS["REDIS_PREFIX"]``, ``"uj"`` by default):

- ``P:{q:<queue>}:`` — a queue: its job rows, the claim order, leases,
  idempotency keys, steps of its runs, the slots of its capped jobs,
  counter buckets and its pause (see ``lua/lib.lua`` for each key). A
  queue name outside ``[A-Za-z0-9._-]`` is tagged by its SHA-1 instead
  (``{q:#<hex>}``), since ``{`` or ``}`` in it would move the tag;
- ``P:{f}:`` — the fleet: the queue list, job-name pins, the lease-key
  index, the fence sequence, the worker registry and cron tasks
  (``lua/fleet.lua``);
- ``P:{e}:`` — events and the runs waiting on them (``lua/events.lua``);
- ``P:{l:<hash>}:`` — one lock's (or leader lease's) slots.

Wake-ups are published on the channel ``P:wake`` (pub/sub reaches every
node of a cluster).
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["Layout"]

_PLAIN = re.compile(r"[A-Za-z0-9._-]{1,100}")


class Layout:
    """The key prefixes of one namespace (``REDIS_PREFIX``)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.fleet = f"{prefix}:{{f}}:"
        self.events = f"{prefix}:{{e}}:"
        self.channel = f"{prefix}:wake"
        self._queues: dict[str, str] = {}

    def queue(self, name: str) -> str:
        """The key prefix of queue ``name`` (its hash tag included)."""
        known = self._queues.get(name)
        if known is None:
            tag = name if _PLAIN.fullmatch(name) else "#" + _digest(name)
            known = self._queues[name] = f"{self.prefix}:{{q:{tag}}}:"
        return known

    def lock(self, key: str) -> str:
        """The key prefix of the slot that holds lease ``key``'s rows."""
        return f"{self.prefix}:{{l:{_digest(key)[:16]}}}:"

    def home(self, key: str, where: str) -> str:
        """The prefix for a lease key's stored home (``q:<queue>`` or ``l``)."""
        if where.startswith("q:"):
            return self.queue(where[2:])
        return self.lock(key)


def _digest(text: str) -> str:
    return hashlib.sha1(
        text.encode("utf-8", "surrogatepass"), usedforsecurity=False
    ).hexdigest()
