"""``lock()``: one holder fleet-wide, fencing tokens, renewal, loss, refusals.

The Postgres tests use committed rows (``transactional_db``): the lock
keeper writes on its own connection, as it does in production.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models.functions import Now

from django_ultimate_jobs import fenced_update, lock
from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.models import Lease
from tests.jobsapp.models import Invoice
from tests.support.waiting import wait_until


def refused_elsewhere(key: str, **options) -> JobsError:
    """The error another thread of this process gets taking ``key``."""
    from django.db import connections

    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            with lock(key, **options):
                pass  # pragma: no cover - never entered
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(30)
    (error,) = errors
    assert isinstance(error, JobsError), error
    return error


# -- the memory driver: the semantics, no database ----------------------------------


@pytest.fixture
def memory():
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))
    driver = MemoryDriver(clock=clock)
    yield driver, clock
    driver.close()


def test_a_held_lock_refuses_a_second_holder_naming_the_first(memory):
    driver, _ = memory
    with lock("invoice:1", ttl="30s", driver=driver) as held:
        assert held.token >= 1 and not held.lost
        refused = refused_elsewhere("invoice:1", ttl="30s", wait=0, driver=driver)
        assert refused.code == "X_LOCK_NOT_ACQUIRED"
        assert refused.meta["holder"] == held.holder
        assert held.holder in refused.cause
        assert driver.leases.holders("lock:invoice:1") == [held.holder]
    assert driver.leases.holders("lock:invoice:1") == []
    with lock("invoice:1", ttl="30s", wait=0, driver=driver) as again:
        assert again.token > held.token


def test_a_waiter_gets_the_lock_when_this_process_releases_it(memory):
    driver, _ = memory
    got: list[int] = []
    entered = threading.Event()
    release = threading.Event()

    def first() -> None:
        with lock("wait:1", ttl="30s", driver=driver) as held:
            got.append(held.token)
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)

    def second() -> None:
        with lock("wait:1", ttl="30s", wait="10s", driver=driver) as held:
            got.append(held.token)

    waiter = threading.Thread(target=second)
    waiter.start()
    release.set()
    thread.join(10)
    waiter.join(10)
    assert len(got) == 2 and got[1] > got[0]


@pytest.mark.parametrize(
    ("key", "options", "why"),
    [
        ("", {"ttl": "30s"}, "non-empty"),
        ("   ", {"ttl": "30s"}, "blank"),
        ("x" * 201, {"ttl": "30s"}, "200 characters"),
        ("a\x00b", {"ttl": "30s"}, "NUL"),
        (42, {"ttl": "30s"}, "string"),
        ("k", {"ttl": "999ms"}, "at least 1s"),
        ("k", {"ttl": "soon"}, "not a duration"),
        ("k", {"ttl": 0}, "more than zero"),
        ("k", {"ttl": "30s", "wait": "-1s"}, "not a duration"),
        ("k", {"ttl": "30s", "wait": 1.5}, "float"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    memory, key, options, why
):
    driver, _ = memory
    with pytest.raises(JobsError) as refused:
        with lock(key, driver=driver, **options):
            pass  # pragma: no cover - never entered
    assert refused.value.code == "X_LOCK_INVALID"
    assert why in refused.value.cause
    assert driver.leases.records() == []


def test_ttl_is_required():
    with pytest.raises(TypeError):
        lock("k")  # type: ignore[call-arg]


def test_the_decorator_formats_its_key_from_the_arguments(memory):
    driver, _ = memory
    seen: list[list[str]] = []

    @lock("invoice:{invoice_id}", ttl="30s", driver=driver)
    def send(invoice_id: int, note: str = "") -> int:
        seen.append(driver.leases.holders(f"lock:invoice:{invoice_id}"))
        return invoice_id * 2

    @lock(lambda account, **_: f"account:{account}", ttl="30s", driver=driver)
    def settle(account: str, *, amount: int) -> None:
        seen.append(driver.leases.holders(f"lock:account:{account}"))

    assert send(7) == 14
    settle("acme", amount=3)
    assert [len(holders) for holders in seen] == [1, 1]
    assert driver.leases.records() == []  # both released


def test_a_decorator_template_naming_no_parameter_is_refused_at_decoration():
    with pytest.raises(JobsError) as refused:

        @lock("invoice:{missing}", ttl="30s")
        def send(invoice_id: int) -> None: ...

    assert refused.value.code == "X_LOCK_INVALID"


def test_a_lapsed_lock_sets_cancellation_and_leaving_raises_lock_lost(memory):
    """The body succeeded, but its work was not exclusive: X_LOCK_LOST."""
    driver, clock = memory
    with pytest.raises(JobsError) as lost:
        with lock("lapse:1", ttl="1s", driver=driver) as held:
            clock.advance(seconds=1)  # the store's clock: the lease lapsed
            assert held.cancellation.wait(10), "the next renewal is refused"
            assert held.lost
    assert lost.value.code == "X_LOCK_LOST"
    assert lost.value.meta["token"] == held.token


def test_an_exception_in_a_lost_block_is_the_lock_lost_errors_cause(memory):
    driver, clock = memory
    with pytest.raises(JobsError) as lost:
        with lock("lapse:2", ttl="1s", driver=driver) as held:
            clock.advance(seconds=1)
            held.cancellation.wait(10)
            raise ValueError("the body failed too")
    assert lost.value.code == "X_LOCK_LOST"
    assert isinstance(lost.value.__cause__, ValueError)


def test_an_exception_in_a_held_block_releases_and_propagates(memory):
    driver, _ = memory
    with pytest.raises(ValueError):
        with lock("boom", ttl="30s", driver=driver):
            raise ValueError("boom")
    assert driver.leases.records() == []


# -- PostgreSQL ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_ten_thousand_grants_from_16_threads_have_strictly_increasing_tokens(
    committed_pg_driver,
):
    """One key, 16 threads: grants in holding order have increasing tokens."""
    grants: list[int] = []
    inside = threading.Lock()
    overlaps: list[int] = []
    per_thread = 625
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per_thread):
                with lock("grants", ttl="10s", wait="60s") as held:
                    if not inside.acquire(blocking=False):
                        overlaps.append(held.token)  # two holders at once
                        continue
                    grants.append(held.token)
                    inside.release()
        except BaseException as error:  # reported below
            errors.append(error)

    started = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    took = time.monotonic() - started
    assert errors == []
    assert overlaps == []
    assert len(grants) == 16 * per_thread == 10_000
    assert grants == sorted(grants) and len(set(grants)) == len(grants)
    print(f"10,000 grants from 16 threads in {took:.1f}s")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_renewal_keeps_a_lock_held_past_its_ttl(committed_pg_driver):
    with lock("renewed", ttl="1s") as held:
        first = Lease.objects.get(lease_key="lock:renewed")
        started = time.monotonic()
        # Three ttls: without renewals the row would have lapsed twice over.
        wait_until(lambda: time.monotonic() - started > 3, 10)
        refused = refused_elsewhere("renewed", ttl="1s", wait=0)
        assert refused.code == "X_LOCK_NOT_ACQUIRED"
        row = Lease.objects.get(lease_key="lock:renewed")
        assert (row.holder, row.fence) == (held.holder, held.token)
        assert row.expires_at > first.expires_at + timedelta(seconds=2)
        assert not held.lost
    assert not Lease.objects.filter(lease_key="lock:renewed").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_lock_whose_lease_lapsed_raises_lock_lost_on_leaving(committed_pg_driver):
    """A lapsed lease is lost even if nobody took it; the block's success is void."""
    with pytest.raises(JobsError) as lost:
        with lock("lapsed", ttl="1s") as held:
            # What a holder frozen past its ttl finds: its row lapsed.
            Lease.objects.filter(lease_key="lock:lapsed").update(
                expires_at=Now() - timedelta(seconds=1)
            )
            # The next renewal (every 333 ms) is refused.
            assert held.cancellation.wait(5)
    assert lost.value.code == "X_LOCK_LOST"
    assert not Lease.objects.filter(lease_key="lock:lapsed").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_holder_paused_past_its_ttl_cannot_write_with_its_old_token(
    committed_pg_driver,
):
    """The documented fencing helper refuses the older token; nothing changes."""
    invoice = Invoice.objects.create()
    rows = Invoice.objects.filter(pk=invoice.pk)
    # A holder whose renewals stopped (frozen process): granted, never renewed.
    paused = committed_pg_driver.leases.acquire("lock:invoice", 1, 300, "paused")
    assert paused is not None
    assert fenced_update(rows, paused.fence, status="paused-1") == 1
    with lock("invoice", ttl="30s", wait="10s") as held:
        assert held.token > paused.fence
        assert held.fenced_update(rows, status="sent") == 1
        # The paused holder wakes up and writes with its old token.
        with pytest.raises(JobsError) as stale:
            fenced_update(rows, paused.fence, status="paused-2")
        assert stale.value.code == "X_LOCK_TOKEN_STALE"
        assert held.fenced_update(rows, status="sent-again") == 1  # same token: ok
    invoice.refresh_from_db()
    assert (invoice.status, invoice.lock_token) == ("sent-again", held.token)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fenced_update_refuses_bad_tokens_and_fields(committed_pg_driver):
    rows = Invoice.objects.filter(pk=Invoice.objects.create().pk)
    for token, field in ((0, "lock_token"), (True, "lock_token"), (5, "nope")):
        with pytest.raises(JobsError) as refused:
            fenced_update(rows, token, field=field, status="x")
        assert refused.value.code == "X_LOCK_INVALID"
    assert rows.get().status == "draft"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_grants_on_separate_connections_never_share_a_slot(
    committed_pg_driver,
):
    """8 threads, each on its own connection, race for 2 slots of one key."""
    from django.db import connections

    leases = committed_pg_driver.leases
    holding: dict[int, str] = {}
    guard = threading.Lock()
    clashes: list[tuple[int, str, str]] = []
    granted: list[int] = []

    def race(me: str) -> None:
        try:
            for _ in range(150):
                lease = leases.acquire("job:race", 2, 10_000, me)
                if lease is None:
                    continue
                with guard:
                    if lease.slot in holding:
                        clashes.append((lease.slot, holding[lease.slot], me))
                    holding[lease.slot] = me
                    granted.append(lease.fence)
                # Still ours while held: nobody took the live row over.
                if me not in leases.holders("job:race"):
                    clashes.append((lease.slot, "taken over", me))
                with guard:
                    holding.pop(lease.slot, None)
                if not leases.release(lease):
                    clashes.append((lease.slot, "released by another", me))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(f"t{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert clashes == []
    assert len(granted) >= 50 and len(set(granted)) == len(granted)
    assert leases.held("job:race") == 0


def test_a_lock_released_in_time_never_reads_as_lost_afterwards(memory):
    driver, _ = memory
    with lock("ended", ttl="1s", driver=driver) as held:
        pass
    ended = time.monotonic()
    # Past the ttl of the last renewal: the ended block's lock was not lost.
    wait_until(lambda: time.monotonic() - ended > 1.2, 5)
    assert not held.lost and held.cancellation.reason is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_lock_taken_inside_a_transaction_is_seen_at_once_and_outlives_a_rollback(
    committed_pg_driver,
):
    """The keeper writes on its own connection: never part of the caller's work."""
    from django.db import transaction

    seen: list[list[str]] = []

    def look() -> None:
        from django.db import connections

        try:
            seen.append(committed_pg_driver.leases.holders("lock:in-atomic"))
        finally:
            connections.close_all()

    outer = lock("in-atomic", ttl="30s")
    with pytest.raises(RuntimeError), transaction.atomic():
        held = outer.__enter__()
        other = threading.Thread(target=look)
        other.start()
        other.join(10)
        raise RuntimeError("roll the caller's transaction back")
    try:
        assert seen == [[held.holder]]
        assert committed_pg_driver.leases.holders("lock:in-atomic") == [held.holder]
        refused = refused_elsewhere("in-atomic", ttl="30s", wait=0)
        assert refused.code == "X_LOCK_NOT_ACQUIRED"
    finally:
        outer.__exit__(None, None, None)
    assert committed_pg_driver.leases.holders("lock:in-atomic") == []


# -- what a reviewer met using it from the docs --------------------------------------


def lost_in_memory(driver, clock, key: str):
    """Enter ``key`` and lapse it (the store's clock); answer the entered lock."""
    entered = lock(key, ttl="1s", driver=driver)
    held = entered.__enter__()
    clock.advance(seconds=1)
    assert held.cancellation.wait(10), "the next renewal is refused"
    return entered, held


def test_cancellation_wait_waits_its_full_timeout_while_the_lock_is_held(memory):
    """Renewals (every ttl / 3) and the ttl deadline do not cut the wait short."""
    driver, _ = memory
    with lock("full-wait", ttl="1s", driver=driver) as held:
        started = time.monotonic()
        assert held.cancellation.wait(1.6) is False
        waited = time.monotonic() - started
        assert not held.lost
    assert waited >= 1.55, f"returned after {waited:.2f}s of 1.6s"


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_generator_functions_are_refused_at_decoration(kind):
    """A generator's body runs after the call returns: the lock would not cover it."""
    with pytest.raises(JobsError) as refused:
        if kind == "generator":

            @lock("gen", ttl="30s")
            def rows():
                yield 1

        else:

            @lock("gen", ttl="30s")
            async def rows():
                yield 1

    assert refused.value.code == "X_LOCK_INVALID"
    assert f"not {kind} functions" in refused.value.cause


def test_a_lost_lock_lets_the_next_thread_of_this_process_take_the_key(memory):
    """The in-process gate passes on when its owner's lock is lost."""
    driver, clock = memory
    entered, held = lost_in_memory(driver, clock, "lost-gate")
    try:
        taken: list[int] = []
        errors: list[BaseException] = []

        def next_thread() -> None:
            try:
                with lock("lost-gate", ttl="1s", wait="3s", driver=driver) as again:
                    taken.append(again.token)
            except BaseException as error:  # reported below
                errors.append(error)

        started = time.monotonic()
        thread = threading.Thread(target=next_thread)
        thread.start()
        thread.join(10)
        assert errors == [] and taken and taken[0] > held.token
        assert time.monotonic() - started < 1.5, "waited for the lost holder"
    finally:
        with pytest.raises(JobsError) as lost:
            entered.__exit__(None, None, None)
    assert lost.value.code == "X_LOCK_LOST"
    assert driver.leases.records() == []


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("k:{}", "positional field"),
        ("k:{0}", "positional field"),
        ("k:{x", "not a valid str.format template"),
        ("k:{missing}", "no parameter for"),
    ],
)
def test_bad_decorator_templates_are_refused_at_decoration(template, why):
    with pytest.raises(JobsError) as refused:

        @lock(template, ttl="30s")
        def work(x: int) -> None: ...

    assert refused.value.code == "X_LOCK_INVALID"
    assert why in refused.value.cause
    assert "{invoice_id}" in refused.value.fix


def test_a_template_without_fields_is_one_fixed_key(memory):
    driver, _ = memory
    seen: list[list[dict]] = []

    @lock("nightly-{{report}}", ttl="30s", driver=driver)
    def report(day: str) -> None:
        seen.append([(r.key, r.holder) for r in driver.leases.records()])

    report("mon")
    report("tue")
    assert [[key for key, _ in rows] for rows in seen] == [
        ["lock:nightly-{report}"],
        ["lock:nightly-{report}"],
    ]


def test_a_template_field_the_arguments_cannot_fill_is_coded(memory):
    driver, _ = memory

    @lock("invoice:{invoice.missing}", ttl="30s", driver=driver)
    def send(invoice: int) -> None: ...

    with pytest.raises(JobsError) as refused:
        send(7)
    assert refused.value.code == "X_LOCK_INVALID"
    assert driver.leases.records() == []


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_base_exception_leaving_a_lost_block_propagates_unchanged(
    memory, caplog, interrupt
):
    """Ctrl-C or sys.exit() in a lost block is not turned into an Exception."""
    driver, clock = memory
    with pytest.raises(interrupt):
        with lock("interrupted", ttl="1s", driver=driver) as held:
            clock.advance(seconds=1)
            assert held.cancellation.wait(10)
            raise interrupt()
    (logged,) = [
        record
        for record in caplog.records
        if record.getMessage() == "jobs.lock.lost" and interrupt.__name__ in record.why
    ]
    assert logged.holder == held.holder

    def lapse_then_interrupt() -> None:
        clock.advance(seconds=1)
        wait_until(lambda: driver.leases.holders("lock:interrupted-fn") == [], 5)
        raise interrupt()

    decorated = lock("interrupted-fn", ttl="1s", driver=driver)(lapse_then_interrupt)
    with pytest.raises(interrupt):
        decorated()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("token", "values", "why"),
    [
        (2**63, {"status": "x"}, "at most 2**63 - 1"),
        (5, {"status": "x", "field": "status"}, "not an integer column"),
        (5, {"status": "x", "lock_token": 9}, "must not set it"),
        (5, {"nope": 1}, "no field 'nope'"),
    ],
)
def test_fenced_update_refuses_what_it_cannot_write_before_writing(
    committed_pg_driver, token, values, why
):
    rows = Invoice.objects.filter(pk=Invoice.objects.create().pk)
    with pytest.raises(JobsError) as refused:
        fenced_update(rows, token, **values)
    assert refused.value.code == "X_LOCK_INVALID"
    assert why in refused.value.cause
    assert rows.values_list("status", "lock_token").get() == ("draft", None)
    assert fenced_update(Invoice.objects.filter(pk=-1), 5, status="x") == 0


def test_a_driver_that_is_not_a_driver_is_refused_at_the_call():
    with pytest.raises(JobsError) as refused:
        lock("x", ttl="5s", driver="nope")  # type: ignore[arg-type]
    assert refused.value.code == "X_LOCK_INVALID"
    assert "driver must be a jobs driver, not str" in refused.value.cause


def test_each_refusal_says_its_own_cause_and_fix(memory):
    driver, _ = memory
    from django_ultimate_jobs.errors import LockInvalid

    refusals: dict[str, JobsError] = {}
    for name, make in {
        "blank key": lambda: lock("", ttl="30s", driver=driver),
        "key type": lambda: lock(42, ttl="30s"),  # type: ignore[arg-type]
        "short ttl": lambda: lock("k", ttl="500ms"),
        "bad ttl": lambda: lock("k", ttl="soon"),
        "bad wait": lambda: lock("k", ttl="30s", wait="0"),
        "driver": lambda: lock("k", ttl="30s", driver="nope"),  # type: ignore[arg-type]
        "token": lambda: fenced_update(Invoice.objects.none(), 0),
    }.items():
        with pytest.raises(JobsError) as refused:
            make()
        assert refused.value.code == "X_LOCK_INVALID", name
        refusals[name] = refused.value
    assert "template" not in refusals["blank key"].cause
    assert "'0s'" in refusals["bad wait"].fix
    fixes = [error.fix for error in refusals.values()]
    assert LockInvalid.default_fix not in fixes
    assert len(set(fixes)) == len(fixes)


def test_taking_a_lock_this_thread_holds_is_refused_at_once(memory):
    driver, _ = memory
    with lock("again", ttl="30s", driver=driver) as held:
        started = time.monotonic()
        with pytest.raises(JobsError) as refused:
            with lock("again", ttl="30s", wait="5s", driver=driver):
                pass  # pragma: no cover - never entered
        assert time.monotonic() - started < 1
        with lock("again:other", ttl="30s", wait=0, driver=driver):
            pass  # another key nests fine
    assert refused.value.code == "X_LOCK_INVALID"
    assert "not re-entrant" in refused.value.cause
    assert refused.value.meta["holder"] == held.holder
    assert driver.leases.records() == []


def test_a_forked_child_leaving_its_parents_lock_fails_fast(memory):
    """A lock belongs to the process that took it: the child gets X_LOCK_LOST at once."""
    import os
    import warnings

    driver, _ = memory
    entered = lock("forked", ttl="30s", driver=driver)
    held = entered.__enter__()
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        answer = "none"
        started = time.monotonic()
        try:
            entered.__exit__(None, None, None)
        except JobsError as error:
            answer = f"{error.code}|{'fork' in error.cause}"
        finally:
            took = time.monotonic() - started
            os.write(write, f"{answer}|{took:.2f}".encode())
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            code, says_fork, took = pipe.read().split("|")
        os.waitpid(pid, 0)
        assert (code, says_fork) == ("X_LOCK_LOST", "True")
        assert float(took) < 1, f"the child took {took}s to leave"
        assert driver.leases.holders("lock:forked") == [held.holder]
        assert not held.lost
    finally:
        entered.__exit__(None, None, None)
    assert driver.leases.records() == []


def test_a_release_the_store_does_not_answer_logs_one_line(memory, caplog, monkeypatch):
    """An expected failure (the keeper timed out) is one line, no traceback."""
    import importlib

    lock_module = importlib.import_module("django_ultimate_jobs.locks.lock")
    driver, _ = memory
    monkeypatch.setattr(lock_module, "RELEASE_TIMEOUT_S", 0.2)
    entered = lock("stuck-release", ttl="30s", driver=driver)
    entered.__enter__()
    with driver._lock:  # the store does not answer
        entered.__exit__(None, None, None)
    (logged,) = [
        r for r in caplog.records if r.getMessage() == "jobs.lock.release-failed"
    ]
    assert logged.exc_info is None and "CallTimedOut" in logged.error
    wait_until(lambda: driver.leases.records() == [], 5)  # it landed later


def test_leaving_twice_or_without_entering_is_coded(memory):
    driver, _ = memory
    never = lock("never", ttl="30s", driver=driver)
    with pytest.raises(JobsError) as refused:
        never.__exit__(None, None, None)
    assert refused.value.code == "X_LOCK_INVALID"
    twice = lock("twice", ttl="30s", driver=driver)
    with twice:
        pass
    with pytest.raises(JobsError) as again:
        twice.__exit__(None, None, None)
    assert again.value.code == "X_LOCK_INVALID" and "left" in again.value.cause


def test_async_with_is_refused_with_a_code(memory):
    import asyncio

    driver, _ = memory

    async def use() -> None:
        async with lock("async", ttl="30s", driver=driver):  # type: ignore[attr-defined]
            pass  # pragma: no cover - never entered

    with pytest.raises(JobsError) as refused:
        asyncio.run(use())
    assert (
        refused.value.code == "X_LOCK_INVALID" and "async with" in refused.value.cause
    )


@pytest.mark.parametrize("wait", ["0s", "0ms", 0])
def test_a_zero_wait_tries_once_in_any_duration_form(memory, wait):
    driver, _ = memory
    with lock("zero", ttl="30s", driver=driver):
        started = time.monotonic()
        refused = refused_elsewhere("zero", ttl="30s", wait=wait, driver=driver)
        assert refused.code == "X_LOCK_NOT_ACQUIRED"
        assert time.monotonic() - started < 1
