"""Time-ordered ids (UUIDv7): new rows land at the right edge of the index."""

from __future__ import annotations

import os
import threading
import time
import uuid

__all__ = ["monotonic_uuid7", "uuid7"]

_last = 0
_last_lock = threading.Lock()


def uuid7() -> uuid.UUID:
    """Return a new UUIDv7 (RFC 9562): 48-bit Unix ms, then 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & 0x3FFF_FFFF_FFFF_FFFF  # rand_b, 62 bits
    return uuid.UUID(int=value)


def monotonic_uuid7() -> uuid.UUID:
    """A UUIDv7 greater than every one this process answered before.

    Two :func:`uuid7` of one millisecond are in random order; the outbox
    orders one transaction's messages by id (they share ``staged_at``), so
    its ids must follow call order: a value not above the last one becomes
    the last one plus one (RFC 9562 method 2, the counter in the random bits).
    """
    global _last
    value = uuid7().int
    with _last_lock:
        if value <= _last:
            value = _last + 1
        _last = value
    return uuid.UUID(int=value)
