"""Time-ordered ids (UUIDv7): new rows land at the right edge of the index."""

from __future__ import annotations

import os
import time
import uuid

__all__ = ["uuid7"]


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
