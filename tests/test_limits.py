"""job(concurrency=...): the lease key at enqueue, slots through the worker path.

The fleet-wide proof (three runjobs processes, a SIGKILLed holder) is in
tests/acceptance/test_limits_fleet.py; the driver semantics are in the
conformance suite (django_ultimate_jobs/testing/conformance_limits.py).
"""

from __future__ import annotations

import threading

import pytest

from django_ultimate_jobs import Concurrency
from django_ultimate_jobs.drivers.base import AckRequest, Handover
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.models import Job, Lease
from django_ultimate_jobs.operator import retry as operator_retry
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.executor import run_attempt
from django_ultimate_jobs.worker.runner import Worker

pytestmark = pytest.mark.postgres


@pytest.fixture
def declared(declare_jobs):
    return declare_jobs("capped", "t.capped")


def drain(driver):
    return run_jobs(queues=["capped"], driver=driver)


def test_a_plain_cap_stores_the_job_lease_key(pg_driver, declared):
    """concurrency=N: key job:<name>, limit N, on the row."""

    @declared(concurrency=2)
    def plain(ctx):
        return None

    enqueued = plain.enqueue()
    row = Job.objects.get(id=enqueued.id)
    assert (row.concurrency_key, row.concurrency_limit) == ("job:t.capped.plain", 2)


def test_a_keyed_cap_encodes_the_name_and_keeps_the_key(pg_driver, declare_jobs):
    """Keyed: job-key:<URI-encoded name>:<key>, for enqueue and enqueue_many."""

    @declare_jobs("capped", "t:odd name")(
        concurrency=Concurrency(key=lambda i: i["account"], limit=1)
    )
    def keyed(ctx, *, account: str):
        return None

    one = keyed.enqueue(account="a:b")
    many = keyed.enqueue_many([{"account": "c"}])
    keys = dict(Job.objects.values_list("id", "concurrency_key"))
    assert keys[one.id] == "job-key:t%3Aodd%20name.keyed:a:b"
    assert keys[many[0].id] == "job-key:t%3Aodd%20name.keyed:c"


def test_uncapped_jobs_carry_no_key(pg_driver, declared):
    @declared()
    def free(ctx):
        return None

    row = Job.objects.get(id=free.enqueue().id)
    assert (row.concurrency_key, row.concurrency_limit) == (None, None)


@pytest.mark.parametrize(
    "answer",
    ["", "x" * 201, 42, None, "bad\x00key", " ", "\t\n "],
    ids=["empty", "long", "int", "none", "nul", "space", "whitespace"],
)
def test_a_bad_key_is_refused_before_anything_is_written(pg_driver, declared, answer):
    """The key must be a non-blank str of at most 200 characters; never echoed.

    A key of only whitespace was accepted (one bucket for every blank key)
    where ``lock(" ")`` is refused: refused here the same way.
    """

    @declared(concurrency=Concurrency(key=lambda i: answer, limit=1))
    def keyed(ctx, *, secret: str):
        return None

    with pytest.raises(JobsError) as info:
        keyed.enqueue(secret="s3cr3t-value")
    assert info.value.code == "X_JOB_DECLARATION_INVALID"
    assert "s3cr3t" not in str(info.value) and "x" * 50 not in str(info.value)
    with pytest.raises(JobsError):
        keyed.enqueue_many([{"secret": "s3cr3t-value"}])
    assert not Job.objects.filter(name=keyed.name).exists()


def test_a_raising_key_function_is_refused_without_its_message(pg_driver, declared):
    def boom(given):
        raise KeyError(given["secret"])

    @declared(concurrency=Concurrency(key=boom, limit=1))
    def keyed(ctx, *, secret: str):
        return None

    with pytest.raises(JobsError) as info:
        keyed.enqueue(secret="s3cr3t-value")
    assert info.value.code == "X_JOB_DECLARATION_INVALID"
    assert "s3cr3t" not in str(info.value)
    assert not Job.objects.filter(name=keyed.name).exists()


def test_run_jobs_runs_capped_jobs_one_slot_at_a_time(pg_driver, declared):
    """run_jobs() no longer refuses a capped job; the cap holds round by round."""
    seen = []

    @declared(concurrency=1)
    def single(ctx, *, n: int):
        seen.append((n, list(Lease.objects.values_list("lease_key", "slot"))))

    single.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    executions = drain(pg_driver)
    assert [e.outcome for e in executions] == ["completed"] * 3
    # Each body ran holding slot 0 alone; every settle freed it.
    assert [slots for _, slots in seen] == [[("job:t.capped.single", 0)]] * 3
    assert not Lease.objects.exists()


def test_rows_queued_with_a_key_run_after_concurrency_is_removed(pg_driver, declared):
    """A deploy that removes concurrency= does not strand the rows queued with a key.

    The rows the old release enqueued carry its lease key; the new registry
    declares no cap anywhere, so the worker's ordinary claim leaves them
    out. Its empty claim is followed by the capped one, which takes them
    with a slot of their stored key and limit.
    """

    @declared()
    def was_capped(ctx, *, n: int):
        return None

    ids = [e.id for e in was_capped.enqueue_many([{"n": 1}, {"n": 2}])]
    # As the release that declared concurrency=1 wrote them.
    Job.objects.filter(id__in=ids).update(
        concurrency_key="job:t.capped.was_capped", concurrency_limit=1
    )
    executions = drain(pg_driver)
    assert [e.outcome for e in executions] == ["completed"] * 2
    assert set(Job.objects.filter(id__in=ids).values_list("state", flat=True)) == {
        "done"
    }
    assert not Lease.objects.exists()


def test_when_busy_fail_refuses_on_evidence_and_retry_requeues(pg_driver, declared):
    """Another run holds the key: failed X_JOB_KEY_BUSY, body not run, no attempt."""
    ran = []

    @declared(
        concurrency=Concurrency(key=lambda i: i["account"], limit=1, when_busy="fail"),
        retry=None,
    )
    def exclusive(ctx, *, account: str, n: int):
        ran.append(n)

    first = exclusive.enqueue(account="acme", n=1)
    second = exclusive.enqueue(account="acme", n=2)
    other = exclusive.enqueue(account="other", n=3)
    outcomes = {e.claimed.id: e.outcome for e in drain(pg_driver)}
    # One test transaction: both acme rows have one run_at, and UUIDv7s of
    # one millisecond are not ordered, so either may take the key first.
    assert sorted([outcomes[first.id], outcomes[second.id]]) == ["completed", "refused"]
    assert outcomes[other.id] == "completed"
    ran_first, refused = (first, second)
    if outcomes[first.id] == "refused":
        ran_first, refused = second, first
    assert sorted(ran) == sorted([1 if ran_first is first else 2, 3])
    row = Job.objects.get(id=refused.id)
    assert (row.state, row.attempt) == ("failed", 0)
    assert row.last_error.startswith("X_JOB_KEY_BUSY")
    assert "acme" not in row.last_error
    operator_retry(refused.id)
    assert [e.outcome for e in drain(pg_driver)] == ["completed"]
    assert sorted(ran) == [1, 2, 3]


def test_when_busy_wait_runs_the_second_later(pg_driver, declared):
    ran = []

    @declared(concurrency=Concurrency(key=lambda i: i["account"], limit=1))
    def waiting(ctx, *, account: str, n: int):
        ran.append(n)

    waiting.enqueue(account="acme", n=1)
    waiting.enqueue(account="acme", n=2)
    assert [e.outcome for e in drain(pg_driver)] == ["completed", "completed"]
    assert sorted(ran) == [1, 2]
    assert set(Job.objects.values_list("attempt", flat=True)) == {1}


def test_a_lost_slot_stops_the_body_with_slot_lost(pg_driver, declared):
    """A renewal that finds the slot taken cancels the run: X_JOB_SLOT_LOST, retried."""
    started = threading.Event()
    release = threading.Event()
    observed = []

    @declared(concurrency=1)
    def held(ctx):
        started.set()
        release.wait(5)
        reason = ctx.cancellation.reason
        observed.append(reason.code if reason else None)

    enqueued = held.enqueue()
    worker = Worker(
        WorkerConfig.from_settings(queues=("capped",), concurrency=1), driver=pg_driver
    )
    (attempt,), _ = worker.claims.claim(1)
    body = threading.Thread(
        target=lambda: observed.append(run_attempt(attempt, pg_driver))
    )
    body.start()
    assert started.wait(5)
    # Another holder took the slot (as after a stall past the lease).
    Lease.objects.filter(lease_key="job:t.capped.held").update(holder="elsewhere:x")
    worker.keeper.renew_leases()
    release.set()
    body.join(5)
    code, execution = observed
    assert code == "X_JOB_SLOT_LOST"
    assert execution.outcome == "retried"
    assert execution.nack is not None and execution.nack.error.startswith(
        "X_JOB_SLOT_LOST"
    )
    assert pg_driver.nack(execution.nack) is True
    # The settle landed but freed nothing: the slot is the other holder's.
    assert list(Lease.objects.values_list("holder", flat=True)) == ["elsewhere:x"]
    assert Job.objects.get(id=enqueued.id).state == "ready"


def _hold_first_slot(pg_driver, declared):
    """Three rows of one key (limit 1) and one of another; the first row
    claimed with its slot. Answers (job handle, worker, claimed attempt)."""

    @declared(concurrency=Concurrency(key=lambda i: i["account"], limit=1))
    def keyed(ctx, *, account: str, n: int):
        return None

    keyed.enqueue_many([{"account": "a", "n": n} for n in range(3)])
    worker = Worker(
        WorkerConfig.from_settings(queues=("capped",), concurrency=1), driver=pg_driver
    )
    (attempt,), _ = worker.claims.claim(1)
    assert attempt.claimed.concurrency_key == "job-key:t.capped.keyed:a"
    keyed.enqueue(account="b", n=9)
    return worker, attempt


def _settle_handing_over(pg_driver, worker, attempt, release=()):
    claimed = attempt.claimed
    return pg_driver.ack_many_handover(
        [AckRequest(job_id=claimed.id, identity=claimed.identity)],
        Handover(
            queues=("capped",),
            limit=4,
            worker_id=worker.id,
            visibility_ms=30_000,
            release=release,
        ),
    )


def test_a_settle_hands_its_slot_to_the_next_row_of_its_key(pg_driver, declared):
    """The slot goes to the key's next row, claimed in the settle, with a new fence."""
    worker, attempt = _hold_first_slot(pg_driver, declared)
    key = attempt.claimed.concurrency_key
    before = Lease.objects.get(lease_key=key)
    first = (
        Job.objects.filter(concurrency_key=key, state="ready")
        .order_by("-priority", "run_at", "id")
        .first()
    )
    landed, heirs = _settle_handing_over(pg_driver, worker, attempt)
    assert landed == [True]
    (heir,) = heirs
    row = Job.objects.get(id=heir.id)
    assert (row.id, row.state, row.claimed_by) == (first.id, "running", worker.id)
    assert (heir.concurrency_key, heir.claims, heir.attempt) == (key, 1, 1)
    # The same lease row, now the heir's, fenced anew; the other key untouched.
    after = Lease.objects.get(lease_key=key)
    assert after.id == before.id and after.holder == f"{worker.id}:{heir.id}"
    assert after.fence > before.fence
    assert Lease.objects.count() == 1
    assert Job.objects.filter(state="ready").count() == 2


def test_a_settle_that_lost_its_slot_hands_nothing_over(pg_driver, declared):
    """Fenced: a slot another holder took is neither freed nor handed over."""
    worker, attempt = _hold_first_slot(pg_driver, declared)
    Lease.objects.update(holder="elsewhere:x")
    landed, heirs = _settle_handing_over(pg_driver, worker, attempt)
    assert (landed, heirs) == ([True], [])
    assert list(Lease.objects.values_list("holder", flat=True)) == ["elsewhere:x"]
    assert Job.objects.filter(state="ready").count() == 3


def test_a_released_key_frees_its_slot_instead(pg_driver, declared):
    """A key named in release gets its slot freed, for any claim to take."""
    worker, attempt = _hold_first_slot(pg_driver, declared)
    key = attempt.claimed.concurrency_key
    landed, heirs = _settle_handing_over(pg_driver, worker, attempt, release=[key])
    assert (landed, heirs) == ([True], [])
    assert not Lease.objects.exists()
    assert Job.objects.filter(state="ready").count() == 3


def test_a_settle_hands_no_slot_to_a_row_whose_lower_limit_is_full(pg_driver, declared):
    """The limit was lowered after rows were enqueued: a row enqueued under
    limit 1 is not handed a slot while the key's live slots (2, taken under
    the old limit) fill it; the settled slot is freed instead."""
    worker, attempt = _hold_first_slot(pg_driver, declared)
    key = attempt.claimed.concurrency_key
    Lease.objects.create(
        lease_key=key,
        slot=1,
        holder="elsewhere:y",
        fence=1,
        expires_at=Lease.objects.get(lease_key=key).expires_at,  # the driver's clock
    )
    landed, heirs = _settle_handing_over(pg_driver, worker, attempt)
    assert (landed, heirs) == ([True], [])
    assert list(Lease.objects.values_list("holder", flat=True)) == ["elsewhere:y"]
    assert Job.objects.filter(concurrency_key=key, state="ready").count() == 2
    # Under a limit the live slots leave room for, the next row is handed it.
    Job.objects.filter(concurrency_key=key).update(concurrency_limit=2)
    Job.objects.filter(state="ready").exclude(concurrency_key=key).delete()
    (attempt,), _ = worker.claims.claim(1)
    assert attempt.claimed.concurrency_key == key
    landed, heirs = _settle_handing_over(pg_driver, worker, attempt)
    assert landed == [True] and len(heirs) == 1
