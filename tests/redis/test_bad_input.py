"""Bad input on the Redis driver: the same coded refusals as on PostgreSQL,
before anything is written (tests/test_enqueue.py's tables, on Redis).

"Nothing written" is judged by Redis itself: no key under the test's prefix.
"""

from __future__ import annotations

import contextlib

import pytest

from django_ultimate_jobs.errors import JobInputInvalid
from tests.jobsapp.jobs import charge, noop
from tests.redis.conftest import admin_client
from tests.support.values import nested
from tests.test_enqueue import (
    BAD_INPUTS,
    BAD_USING,
    SECRET,
    UNSTORABLE_TEXT_OPTIONS,
    assert_refused_unechoed,
)

pytestmark = pytest.mark.redis

UNSTORABLE_OPTIONS = [*UNSTORABLE_TEXT_OPTIONS, {"delay": "36501d"}]


@pytest.fixture
def nothing_written(redis_driver, redis_url, prefix):
    """After the test: not one key under the driver's prefix."""
    yield
    with contextlib.closing(admin_client(redis_url)) as admin:
        assert list(admin.scan_iter(match=f"{prefix}:*")) == []


@pytest.mark.parametrize(
    ("options", "fragment"), BAD_USING, ids=[repr(o) for o, _ in BAD_USING]
)
def test_bad_options_are_refused_with_a_code(nothing_written, options, fragment):
    with pytest.raises(JobInputInvalid) as caught:
        noop.using(**options).enqueue()
    assert caught.value.code == "X_JOB_INPUT_INVALID"
    assert fragment in caught.value.cause


@pytest.mark.parametrize("options", UNSTORABLE_OPTIONS, ids=repr)
def test_text_and_times_postgres_refuses_are_refused_on_redis_too(
    nothing_written, options
):
    """Redis could store a NUL or a lone surrogate; it is refused all the
    same, so code written against one driver meets the same refusals."""
    with pytest.raises(JobInputInvalid) as caught:
        noop.using(**options).enqueue()
    assert caught.value.code == "X_JOB_INPUT_INVALID"


@pytest.mark.parametrize(
    ("given", "leaks"),
    [(given, leaks) for _, given, leaks in BAD_INPUTS],
    ids=[kind for kind, _, _ in BAD_INPUTS],
)
def test_bad_input_is_refused_without_echoing_it(nothing_written, given, leaks):
    assert_refused_unechoed(given, leaks)


def test_one_bad_item_refuses_the_whole_batch(nothing_written):
    with pytest.raises(JobInputInvalid) as caught:
        charge.enqueue_many(
            [
                {"invoice_id": 1, "org_id": "acme"},
                {"invoice_id": 2, "org_id": "acme", "coupon": SECRET},
            ]
        )
    assert caught.value.meta["index"] == 1


def test_an_input_nested_past_the_limit_is_refused(nothing_written):
    with pytest.raises(JobInputInvalid) as caught:
        noop.enqueue(tree=nested(100))
    assert "more than 100 levels deep" in caught.value.cause
