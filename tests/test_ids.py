"""Job ids: UUIDv7 (RFC 9562), ascending in call order within a process."""

from __future__ import annotations

import pickle
import time
import uuid

from django_ultimate_jobs.ids import (
    ids_or_new,
    monotonic_uuid7,
    monotonic_uuid7s,
    uuid7,
)


def test_a_uuid7_is_an_ordinary_uuid_of_version_7_with_the_clock_in_front():
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000

    assert type(value) is uuid.UUID
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after
    # Built without UUID.__init__, it behaves like one built with it.
    twin = uuid.UUID(str(value))
    assert value == twin and hash(value) == hash(twin)
    assert value.is_safe == twin.is_safe
    assert pickle.loads(pickle.dumps(value)) == value
    assert {value: 1}[twin] == 1


def test_uuid7s_differ_in_their_74_random_bits():
    values = [uuid7().int for _ in range(200)]
    rand_a = {(value >> 64) & 0xFFF for value in values}
    rand_b = {value & 0x3FFF_FFFF_FFFF_FFFF for value in values}
    assert len(rand_a) > 100 and len(rand_b) == 200


def test_monotonic_ids_ascend_across_singles_and_batches():
    answered = [monotonic_uuid7()]
    for size in (1, 5, 1_000, 0, 3):
        answered.extend(monotonic_uuid7s(size))
        answered.append(monotonic_uuid7())
    assert len(answered) == 1 + 1_009 + 5
    assert answered == sorted(answered)
    assert len(set(answered)) == len(answered)
    assert all(value.version == 7 for value in answered)


def test_a_batch_keeps_given_ids_and_fills_the_rest_in_order():
    given = uuid.uuid4()
    ids = ids_or_new([None, given, None, None])

    assert ids[1] is given
    fresh = [ids[0], ids[2], ids[3]]
    assert fresh == sorted(fresh) and len(set(fresh)) == 3
    assert ids_or_new([]) == []
