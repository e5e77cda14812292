"""Values at the edges of what PostgreSQL stores: deep JSON, 4-byte text."""

from __future__ import annotations

import random

__all__ = ["four_byte_text", "nested"]


def nested(depth: int) -> list:
    """A list nested ``depth`` levels deep (the outermost is level 1)."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def four_byte_text(length: int, seed: int = 0) -> str:
    """``length`` characters of four UTF-8 bytes each, in an order PostgreSQL
    cannot compress (a repeated character would shrink to fit an index).

    Printable ones (CJK Extension B), so the text is also a valid job or queue
    name."""
    chosen = random.Random(seed).choices(range(0x20000, 0x2A6E0), k=length)
    return "".join(map(chr, chosen))
