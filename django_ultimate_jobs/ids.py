"""Time-ordered ids (UUIDv7): new rows land at the right edge of the index."""

from __future__ import annotations

import os
import threading
import time
import uuid

__all__ = ["ids_or_new", "monotonic_uuid7", "monotonic_uuid7s", "uuid7"]

_last = 0
_last_lock = threading.Lock()

_MS_MASK = 0xFFFF_FFFF_FFFF
_VERSION_AND_VARIANT = (0x7 << 76) | (0b10 << 62)
_RAND_A_MASK = 0xFFF << 64  # 12 bits, above the variant
_RAND_B_MASK = 0x3FFF_FFFF_FFFF_FFFF  # 62 bits
_RAND_BYTES = 10  # 80 random bits, 74 of them used

_new_object = object.__new__
_set_slot = object.__setattr__
_UUID = uuid.UUID
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def _from_int(value: int) -> uuid.UUID:
    # uuid.UUID(int=value) checks the range and the keyword arguments: about
    # 2.5 us, a quarter of an enqueue_many() row. Every value here is a valid
    # 128-bit UUIDv7, so its two slots are set directly (as UUID.__init__
    # does; Python 3.14 names this UUID._from_int).
    answer = _new_object(_UUID)
    _set_slot(answer, "int", value)
    _set_slot(answer, "is_safe", _SAFE_UNKNOWN)
    return answer


def _values(count: int) -> list[int]:
    """``count`` UUIDv7 integers of this millisecond, in random order."""
    head = ((time.time_ns() // 1_000_000) & _MS_MASK) << 80 | _VERSION_AND_VARIANT
    randoms = os.urandom(_RAND_BYTES * count)
    from_bytes = int.from_bytes
    values = []
    for start in range(0, _RAND_BYTES * count, _RAND_BYTES):
        rand = from_bytes(randoms[start : start + _RAND_BYTES])
        values.append(head | ((rand << 2) & _RAND_A_MASK) | (rand & _RAND_B_MASK))
    return values


def uuid7() -> uuid.UUID:
    """Return a new UUIDv7 (RFC 9562): 48-bit Unix ms, then 74 random bits."""
    return _from_int(_values(1)[0])


def monotonic_uuid7s(count: int) -> list[uuid.UUID]:
    """``count`` UUIDv7s in ascending order, each greater than every one
    this process answered before (one clock read and one ``os.urandom`` for
    the lot: a batch enqueue's ids)."""
    global _last
    values = sorted(_values(count))
    with _last_lock:
        last = _last
        for index, value in enumerate(values):
            if value <= last:
                values[index] = value = last + 1
            last = value
        _last = last
    return [_from_int(value) for value in values]


def monotonic_uuid7() -> uuid.UUID:
    """A UUIDv7 greater than every one this process answered before.

    Two :func:`uuid7` of one millisecond are in random order; the outbox
    orders one transaction's messages by id (they share ``staged_at``), so
    its ids must follow call order: a value not above the last one becomes
    the last one plus one (RFC 9562 method 2, the counter in the random bits).
    """
    return monotonic_uuid7s(1)[0]


def ids_or_new(given: list[uuid.UUID | None]) -> list[uuid.UUID]:
    """Each given id, and a new :func:`monotonic_uuid7` (in order) for each
    ``None``: the ids of a batch of rows."""
    fresh = iter(monotonic_uuid7s(given.count(None)))
    return [next(fresh) if value is None else value for value in given]
