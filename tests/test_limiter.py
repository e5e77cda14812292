"""The in-process limiter (worker/limits.py) and the LIMITS setting."""

from __future__ import annotations

import math

import pytest

from django_ultimate_jobs.conf import parse_settings
from django_ultimate_jobs.errors import SettingsInvalid
from django_ultimate_jobs.worker.limits import (
    REFUSAL_TTL_S,
    LimitConfig,
    Limiter,
    RateLimit,
    parse_limits,
)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def limiter(clock: Clock | None = None, **limits: object) -> Limiter:
    return Limiter(parse_limits("LIMITS", limits), clock=clock or Clock())


def test_checks_run_global_then_queue_then_tenant_then_rate():
    """The first limit that refuses is the one blocked_by names."""
    limits = limiter(
        **{
            "global": 2,
            "per_queue": 2,
            "per_tenant": 1,
            "rate_per_tenant": {"limit": 1, "window": "1s"},
        }
    )
    held = limits.try_acquire("q", "a")
    assert held is not None
    assert limits.try_acquire("q", "a") is None
    assert limits.blocked_by(tenant="a") == "tenant"  # tenant before rate
    assert limits.try_acquire("q", "b") is not None
    assert limits.try_acquire("other", "c") is None
    assert limits.blocked_by(tenant="c") == "global"  # global before the others
    held.release()
    assert limits.try_acquire("q", "a") is None
    assert limits.blocked_by(tenant="a") == "rate"  # released, but started once


def test_per_queue_limit_names_the_queue():
    """A named queue's limit overrides the default; blocked_by names the queue."""
    limits = limiter(per_queue={"billing": 1})
    assert limits.try_acquire("billing", "a") is not None
    assert limits.try_acquire("billing", "b") is None
    assert limits.blocked_by(queue="billing") == "queue"
    assert limits.try_acquire("default", "b") is not None
    assert limits.open_queues(["billing", "default"]) == ("default",)


def test_zero_is_a_hard_stop():
    """A limit of zero refuses every acquire and every claim."""
    for setting in (
        {"global": 0},
        {"per_tenant": 0},
        {"rate_per_tenant": {"limit": 0, "window": "1s"}},
    ):
        limits = limiter(**setting)
        assert limits.try_acquire("q", "a") is None, setting
        assert limits.claim_room(["q"]) == 0, setting
    queue_stopped = limiter(per_queue=0)
    assert queue_stopped.try_acquire("q", None) is None
    assert queue_stopped.open_queues(["q"]) == ()


def test_tenant_absent_is_its_own_bucket():
    """Jobs without a tenant neither count against nor borrow from a tenant."""
    limits = limiter(per_tenant=1)
    assert limits.try_acquire("q", None) is not None
    assert limits.try_acquire("q", None) is None
    assert limits.try_acquire("q", "global") is not None
    assert limits.full_tenants() == frozenset({None, "global"})


def test_release_is_idempotent_and_counters_go_at_zero():
    """A second release frees nothing twice; an idle limiter holds no counter."""
    limits = limiter(per_tenant=2, per_queue=5)
    first = limits.try_acquire("q", "a")
    second = limits.try_acquire("q", "a")
    assert first is not None and second is not None
    first.release()
    first.release()
    assert limits.in_flight(tenant="a") == 1
    second.release()
    assert limits.snapshot() == {
        "global": 0,
        "queues": {},
        "tenants": 0,
        "rate_windows": 0,
        "refusals": 0,
    }


def test_abandon_takes_back_the_rate_stamp():
    """A run that never started does not spend its tenant's rate allowance."""
    limits = limiter(rate_per_tenant={"limit": 1, "window": "1m"})
    lease = limits.try_acquire("q", "a")
    assert lease is not None
    lease.abandon()
    again = limits.try_acquire("q", "a")
    assert again is not None
    again.release()
    assert limits.try_acquire("q", "a") is None


def test_rate_window_slides():
    """At most limit starts per tenant in any window; older starts age out."""
    clock = Clock()
    limits = limiter(clock, rate_per_tenant={"limit": 2, "window": "1s"})
    for _ in range(2):
        lease = limits.try_acquire("q", "a")
        assert lease is not None
        lease.release()
    assert limits.try_acquire("q", "a") is None
    assert limits.full_tenants() == frozenset({"a"})
    assert limits.try_acquire("q", "b") is not None
    clock.now += 1.001
    assert limits.full_tenants() == frozenset()
    assert limits.try_acquire("q", "a") is not None


def test_next_window_in_is_when_a_rate_full_tenant_may_start_again():
    """The claim loop waits no longer than this (a freed window sends no wake)."""
    clock = Clock()
    limits = limiter(clock, rate_per_tenant={"limit": 2, "window": "1s"})
    assert limits.next_window_in() is None
    limits.try_acquire("q", "a")
    assert limits.next_window_in() is None  # room for one more
    clock.now += 0.25
    limits.try_acquire("q", "a")
    assert limits.next_window_in() == pytest.approx(0.75)
    clock.now += 0.75
    assert limits.next_window_in() is None
    assert limiter(per_tenant=1).next_window_in() is None


def test_claim_room_is_the_tightest_room():
    """A claim never takes more rows than the fullest partly-used tenant may run."""
    limits = limiter(per_tenant=4, **{"global": 10})
    assert limits.claim_room(["q"]) == 4
    for _ in range(3):
        assert limits.try_acquire("q", "a") is not None
    assert limits.claim_room(["q"]) == 1
    assert limits.full_tenants() == frozenset()
    assert limits.try_acquire("q", "a") is not None
    assert limits.full_tenants() == frozenset({"a"})
    assert limits.claim_room(["q"]) == 4  # a is skipped by the claim itself
    assert limiter().claim_room(["q"]) is None


def test_a_claim_that_skips_partly_used_tenants_gets_a_fresh_tenants_room():
    """The worker's every other claim skips tenants that run some jobs here:
    the room is then a fresh tenant's, not the one row a partly used tenant
    has left (a tenant behind a flood got one row a claim)."""
    limits = limiter(per_tenant=4)
    for _ in range(3):
        assert limits.try_acquire("q", "a") is not None
    assert limits.try_acquire("q", None) is not None
    assert limits.partial_tenants() == frozenset({"a", None})
    assert limits.claim_room(["q"]) == 1
    assert limits.claim_room(["q"], without=limits.partial_tenants()) == 4


def test_refusals_are_forgotten_after_their_ttl():
    """blocked_by explains a refusal for REFUSAL_TTL_S, then answers None."""
    clock = Clock()
    limits = limiter(clock, per_tenant=0)
    assert limits.try_acquire("q", "a") is None
    assert limits.blocked_by(tenant="a") == "tenant"
    clock.now += REFUSAL_TTL_S + 1
    assert limits.blocked_by(tenant="a") is None
    limits.try_acquire("q", "b")  # the sweep runs on a later acquire
    assert limits.snapshot()["refusals"] == 1


def test_rate_windows_are_capped_least_throttled_first():
    """Past the cap, windows are forgotten down to 90%, fewest starts first."""
    limits = Limiter(
        LimitConfig(rate_per_tenant=RateLimit(limit=5, window_ms=60_000)),
        clock=Clock(),
        max_tenants=10,
    )
    for _ in range(3):
        lease = limits.try_acquire("q", "busy")
        assert lease is not None
        lease.release()
    for index in range(10):
        lease = limits.try_acquire("q", f"t{index}")
        assert lease is not None
        lease.release()
    assert limits.snapshot()["rate_windows"] <= 10
    assert limits.full_tenants() == frozenset()
    for _ in range(2):
        lease = limits.try_acquire("q", "busy")
        assert lease is not None
        lease.release()
    assert limits.full_tenants() == frozenset({"busy"})  # its window was kept


def test_rate_windows_are_swept():
    """Windows of tenants seen once are dropped once they expire."""
    clock = Clock()
    limits = limiter(clock, rate_per_tenant={"limit": 5, "window": "1s"})
    for index in range(100):
        lease = limits.try_acquire("q", f"t{index}")
        assert lease is not None
        lease.release()
    assert limits.snapshot()["rate_windows"] == 100
    clock.now += 61
    limits.try_acquire("q", "late")
    assert limits.snapshot()["rate_windows"] == 1


@pytest.mark.parametrize(
    "value",
    [
        {"per_tenant": -1},
        {"per_tenant": math.nan},
        {"global": math.inf},
        {"per_queue": 1.5},
        {"per_queue": {"billing": -2}},
        {"per_queue": {"": 1}},
        {"per_queue": {"bill\x00ing": 1}},
        {"per_queue": {" billing": 1}},
        {"per_queue": {"x" * 300: 1}},
        {"per_queue": {3: 1}},
        {"per_tenant": True},
        {"rate_per_tenant": {"limit": 5}},
        {"rate_per_tenant": {"limit": 5, "window": "0s"}},
        {"rate_per_tenant": {"limit": -1, "window": "1s"}},
        {"per_tenant_typo": 1},
        [1],
    ],
)
def test_bad_limits_are_refused_by_the_settings_check(value):
    """A limit that is not a finite whole number >= 0 fails with X_SETTINGS_INVALID."""
    with pytest.raises(SettingsInvalid) as info:
        parse_settings({"LIMITS": value})
    assert info.value.code == "X_SETTINGS_INVALID"


def test_a_bad_per_queue_name_fails_manage_py_check():
    """per_queue names follow the queue-name rule: E001 from the settings check."""
    from django.test import override_settings

    from django_ultimate_jobs.checks import check_settings

    with override_settings(ULTIMATE_JOBS={"LIMITS": {"per_queue": {"a\x00b": 1}}}):
        errors = check_settings()
    assert [e.id for e in errors] == ["ultimate_jobs.E001"]
    assert "NUL" in errors[0].msg


def test_limits_setting_parses():
    """The documented shape parses into the worker's LimitConfig."""
    parsed = parse_settings(
        {
            "LIMITS": {
                "per_tenant": 4,
                "per_queue": {"billing": 2},
                "global": 16,
                "rate_per_tenant": {"limit": 100, "window": "1s"},
            }
        }
    ).limits
    assert parsed == LimitConfig(
        per_tenant=4,
        queues={"billing": 2},
        total=16,
        rate_per_tenant=RateLimit(limit=100, window_ms=1_000),
    )
    assert parsed.queue_limit("billing") == 2 and parsed.queue_limit("x") is None
    assert not parse_settings({}).limits.active


@pytest.mark.parametrize(
    "limits",
    [
        {"per_tenant": -1},
        {"total": math.nan},
        {"queues": {"billing": math.inf}},
        {"rate_per_tenant": RateLimit(limit=1, window_ms=0)},
    ],
)
def test_limits_built_in_code_are_checked_too(limits):
    """A LimitConfig built directly (not from settings) refuses the same values."""
    with pytest.raises(SettingsInvalid):
        LimitConfig(**limits)
