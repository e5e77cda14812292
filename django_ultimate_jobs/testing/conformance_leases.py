"""Conformance checks of the lease store (``driver.leases``): slots and locks.

Mixed into :class:`~django_ultimate_jobs.testing.conformance.DriverConformance`
(fixtures ``clock``, a :class:`~django_ultimate_jobs.clock.ManualClock`, and
``driver``, reading it). Every check uses its own lease keys, so checks can
share a store. Leases lapse by moving the clock, never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..clock import ManualClock
    from ..drivers.base import JobDriver

__all__ = ["LeaseConformance"]

TTL_MS = 30_000


class LeaseConformance:
    """What every driver's ``leases`` must answer."""

    def test_a_lease_takes_the_lowest_free_slot_and_never_over_grants(
        self, driver: JobDriver
    ) -> None:
        leases = driver.leases
        grants = [leases.acquire("conf:lowest", 3, TTL_MS, f"h{n}") for n in range(4)]
        assert [g.slot if g else None for g in grants] == [0, 1, 2, None]
        assert leases.held("conf:lowest") == 3
        assert leases.holders("conf:lowest") == ["h0", "h1", "h2"]
        assert grants[1] is not None and leases.release(grants[1])
        again = leases.acquire("conf:lowest", 3, TTL_MS, "h4")
        assert again is not None and again.slot == 1
        assert leases.holders("conf:lowest") == ["h0", "h4", "h2"]

    def test_every_grant_has_a_greater_fence_than_every_earlier_grant(
        self, driver: JobDriver
    ) -> None:
        leases = driver.leases
        fences = []
        for n in range(5):
            for key in ("conf:fence-a", "conf:fence-b"):
                grant = leases.acquire(key, 1, TTL_MS, f"h{n}")
                assert grant is not None
                fences.append(grant.fence)
                assert leases.release(grant)
        assert fences == sorted(set(fences))

    def test_release_and_renew_are_the_holders_only(self, driver: JobDriver) -> None:
        leases = driver.leases
        grant = leases.acquire("conf:holder-only", 1, TTL_MS, "mine")
        assert grant is not None
        stranger = type(grant)(
            key=grant.key,
            slot=grant.slot,
            holder="stranger",
            fence=grant.fence,
            expires_at=grant.expires_at,
        )
        assert not leases.release(stranger)
        assert not leases.renew(stranger, TTL_MS)
        assert leases.holders("conf:holder-only") == ["mine"]
        assert leases.release(grant)
        assert not leases.release(grant)  # once
        assert leases.holders("conf:holder-only") == []

    def test_a_renewed_lease_outlives_its_first_ttl(
        self, driver: JobDriver, clock: ManualClock
    ) -> None:
        leases = driver.leases
        grant = leases.acquire("conf:renew", 1, TTL_MS, "mine")
        assert grant is not None
        clock.advance(milliseconds=20_000)
        assert leases.renew(grant, TTL_MS)
        clock.advance(milliseconds=20_000)  # 40 s after the grant
        assert leases.holders("conf:renew") == ["mine"]
        assert leases.acquire("conf:renew", 1, TTL_MS, "other") is None

    def test_a_lapsed_lease_is_lost_even_if_nobody_took_it(
        self, driver: JobDriver, clock: ManualClock
    ) -> None:
        leases = driver.leases
        grant = leases.acquire("conf:lapsed", 1, TTL_MS, "mine")
        assert grant is not None
        clock.advance(milliseconds=TTL_MS)
        assert leases.held("conf:lapsed") == 0
        assert not leases.renew(grant, TTL_MS)
        assert leases.holders("conf:lapsed") == []

    def test_a_lapsed_slot_is_granted_again_with_a_greater_fence(
        self, driver: JobDriver, clock: ManualClock
    ) -> None:
        leases = driver.leases
        dead = leases.acquire("conf:takeover", 2, TTL_MS, "dead")
        live = leases.acquire("conf:takeover", 2, TTL_MS, "live")
        assert dead is not None and live is not None
        clock.advance(milliseconds=TTL_MS // 2)
        assert leases.renew(live, TTL_MS)
        assert leases.acquire("conf:takeover", 2, TTL_MS, "early") is None
        clock.advance(milliseconds=TTL_MS // 2)
        taken = leases.acquire("conf:takeover", 2, TTL_MS, "next")
        assert taken is not None
        assert (taken.slot, taken.holder) == (dead.slot, "next")
        assert taken.fence > live.fence > dead.fence
        assert taken.expires_at == clock.now() + timedelta(milliseconds=TTL_MS)
        # The lapsed holder can neither renew nor free what another holds.
        assert not leases.renew(dead, TTL_MS)
        assert not leases.release(dead)
        assert leases.holders("conf:takeover") == ["next", "live"]

    def test_keys_do_not_share_slots(self, driver: JobDriver) -> None:
        leases = driver.leases
        assert leases.acquire("conf:keys:a:b", 1, TTL_MS, "one") is not None
        assert leases.acquire("conf:keys:a", 1, TTL_MS, "two") is not None
        assert leases.holders("conf:keys:a:b") == ["one"]
        assert leases.holders("conf:keys:a") == ["two"]

    def test_records_list_rows_under_a_prefix_with_their_lapse(
        self, driver: JobDriver, clock: ManualClock
    ) -> None:
        leases = driver.leases
        old = leases.acquire("conf:list:b", 2, 1_000, "old")
        new = leases.acquire("conf:list:b", 2, TTL_MS, "new")
        first = leases.acquire("conf:list:a", 1, TTL_MS, "first")
        leases.acquire("conf:other", 1, TTL_MS, "elsewhere")
        assert old is not None and new is not None and first is not None
        clock.advance(milliseconds=1_000)
        records = leases.records(prefix="conf:list:")
        assert [(r.key, r.slot, r.holder, r.expired) for r in records] == [
            ("conf:list:a", 0, "first", False),
            ("conf:list:b", 0, "old", True),
            ("conf:list:b", 1, "new", False),
        ]
        assert [r.fence for r in records] == [first.fence, old.fence, new.fence]
        assert records[1].expires_at == old.expires_at
        assert len(leases.records(prefix="conf:list:", limit=2)) == 2
        assert leases.records(prefix="conf:list:%") == []  # no wildcards

    def test_evict_deletes_every_row_of_one_key_and_the_next_grant_fences_higher(
        self, driver: JobDriver, clock: ManualClock
    ) -> None:
        leases = driver.leases
        grants = [
            leases.acquire(key, limit, ttl, holder)
            for key, limit, ttl, holder in (
                ("conf:evict", 2, 1_000, "stuck"),
                ("conf:evict", 2, TTL_MS, "live"),
                ("conf:evict-other", 1, TTL_MS, "kept"),
            )
        ]
        stuck, live, kept = grants
        assert stuck is not None and live is not None and kept is not None
        clock.advance(milliseconds=1_000)  # the stuck holder's row lapsed
        evicted = leases.evict("conf:evict")
        assert [(r.slot, r.holder, r.fence, r.expired) for r in evicted] == [
            (0, "stuck", stuck.fence, True),
            (1, "live", live.fence, False),
        ]
        assert leases.records(prefix="conf:evict") == leases.records(
            prefix="conf:evict-other"
        )
        assert not leases.renew(live, TTL_MS) and not leases.release(live)
        again = leases.acquire("conf:evict", 2, TTL_MS, "next")
        assert again is not None and again.slot == 0 and again.fence > kept.fence
        assert leases.evict("conf:evict-none") == []

    def test_the_leader_lease_is_a_row_of_the_same_store(
        self, driver: JobDriver, clock: ManualClock
    ) -> None:
        assert driver.cron.leader_acquire("conf:leader", "a", ttl_ms=TTL_MS)
        clock.advance(milliseconds=TTL_MS)
        assert driver.cron.leader_acquire("conf:leader", "b", ttl_ms=TTL_MS)  # takeover
        (record,) = driver.leases.records(prefix="conf:leader")
        assert (record.slot, record.holder, record.fence) == (0, "b", 2)
        assert driver.leases.holders("conf:leader") == ["b"]
        driver.cron.leader_release("conf:leader", "b")
        assert driver.leases.records(prefix="conf:leader") == []
