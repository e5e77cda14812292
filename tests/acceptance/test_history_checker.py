"""The history checker flags what it must (a checker that never fires proves nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from tests.support.history import EffectRow, check_queue, lease_overlaps

pytestmark = pytest.mark.acceptance

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_clean_history_with_a_rerun_is_valid_and_counts_the_duplicate():
    a, b = uuid4(), uuid4()
    effects = [
        EffectRow(a, 1, "w1", _at(0)),
        EffectRow(a, 2, "w2", _at(3)),  # re-run after w1 died: a duplicate
        EffectRow(b, 1, "w2", _at(4)),
    ]
    history = check_queue([a, b], [a, b], effects)
    assert history.valid
    assert history.duplicated == {a: 2}
    assert (history.lost, history.overlaps) == ([], [])


def test_lost_and_unexpected_jobs_are_reported():
    done, never_ran, not_done, stranger = uuid4(), uuid4(), uuid4(), uuid4()
    effects = [
        EffectRow(done, 1, "w1", _at(0)),
        EffectRow(not_done, 1, "w1", _at(1)),
        EffectRow(stranger, 1, "w1", _at(2)),
    ]
    history = check_queue([done, never_ran, not_done], [done, never_ran], effects)
    assert set(history.lost) == {never_ran, not_done}
    assert history.unexpected == [stranger]
    assert not history.valid


def test_an_old_claim_acting_after_a_newer_claim_started_is_an_overlap():
    job = uuid4()
    effects = [
        EffectRow(job, 1, "stalled", _at(0), "start"),
        EffectRow(job, 2, "rescuer", _at(3), "start"),
        EffectRow(job, 1, "stalled", _at(4), "after"),  # woke up and wrote
    ]
    [overlap] = lease_overlaps(effects)
    assert overlap.effect.kind == "after"
    assert overlap.newer.worker == "rescuer"


def test_one_claim_ordinal_held_by_two_workers_is_an_overlap():
    job = uuid4()
    effects = [EffectRow(job, 1, "w1", _at(0)), EffectRow(job, 1, "w2", _at(1))]
    [overlap] = lease_overlaps(effects)
    assert "held by 2 workers" in overlap.why
