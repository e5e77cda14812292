"""Enqueue on a real PostgreSQL: the row written, options, dedupe, refusals.

Every test runs in the test transaction of pytest-django's ``db`` (through
``pg_driver``) with the frozen ``clock``, so ``created_at`` and ``run_at``
are exact. A refused enqueue must write nothing: those tests compare the
job table's row count before and after.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from uuid import UUID

import psycopg
import pydantic
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils.functional import SimpleLazyObject

from django_ultimate_jobs import Enqueued, job, job_enqueued
from django_ultimate_jobs.drivers.base import AckRequest, ClaimOptions
from django_ultimate_jobs.drivers.postgres.sql import query
from django_ultimate_jobs.errors import JobDuplicate, JobInputInvalid
from django_ultimate_jobs.ids import uuid7
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.registry import unregister
from tests.jobsapp.jobs import charge, noop
from tests.support.values import four_byte_text, nested

pytestmark = pytest.mark.postgres

SECRET = "SECRET-4111-1111"


def job_count() -> int:
    return Job.objects.count()


def claim_one(driver, queue: str):
    """Claim the single due job of ``queue`` as a test worker."""
    result = driver.claim(
        ClaimOptions(queues=[queue], limit=10, worker_id="w-test", visibility_ms=30_000)
    )
    (claimed,) = result.claimed
    return claimed


class ChargeModel(pydantic.BaseModel):
    invoice_id: int
    amount: int


@dataclass
class ChargeData:
    invoice_id: int
    amount: int

    def __post_init__(self) -> None:
        if not isinstance(self.amount, int):
            raise TypeError(f"amount {self.amount!r} is not a whole number")


def charge_checker(input):
    if not isinstance(input["amount"], int):
        raise ValueError(f"amount {input['amount']!r} is not a whole number")


def schema_handler(ctx, *, invoice_id: int, amount: int):
    return None


def key_that_raises(input):
    raise ValueError(f"no key for {input['invoice_id']!r}")


@pytest.fixture
def local_jobs():
    """Jobs declared for these tests only (unregistered afterwards)."""
    declared = SimpleNamespace(
        pydantic=job(name="tests.enqueue.pydantic", input_schema=ChargeModel)(
            schema_handler
        ),
        dataclass=job(name="tests.enqueue.dataclass", input_schema=ChargeData)(
            schema_handler
        ),
        callable=job(name="tests.enqueue.callable", input_schema=charge_checker)(
            schema_handler
        ),
        empty_key=job(name="tests.enqueue.empty-key", idempotency_key=lambda i: "")(
            schema_handler
        ),
        raising_key=job(
            name="tests.enqueue.raising-key", idempotency_key=key_that_raises
        )(schema_handler),
        empty_tenant=job(name="tests.enqueue.empty-tenant", tenant=lambda i: "")(
            schema_handler
        ),
        # Same key and tenant derivation as tests.charge, another name.
        refund=job(
            name="tests.enqueue.refund",
            queue="billing",
            idempotency_key=lambda i: f"charge:{i['invoice_id']}",
            tenant=lambda i: i["org_id"],
        )(lambda ctx, *, invoice_id, org_id: None),
    )
    yield declared
    for handle in vars(declared).values():
        unregister(handle.name)


# -- the row an enqueue writes -----------------------------------------------


def test_enqueue_answers_ids_and_writes_the_row(pg_driver, clock):
    """One ``ready`` row with the declared queue, attempts, key and tenant."""
    answer = charge.enqueue(invoice_id=1, org_id="acme", amount=500)

    assert isinstance(answer, Enqueued)
    assert answer.deduped is False
    assert isinstance(answer.id, UUID) and answer.id.version == 7
    assert answer.run_id == answer.id
    row = Job.objects.get(id=answer.id)
    assert row.name == "tests.charge"
    assert row.queue == "billing"
    assert row.priority == 0
    assert row.max_attempts == charge.retry.attempts == 5
    assert row.tenant_id == "acme"
    assert row.idempotency_key == "charge:1"
    assert row.input == {"invoice_id": 1, "org_id": "acme", "amount": 500}
    assert row.state == "ready"
    assert row.run_at == row.created_at == row.updated_at == clock.now()
    assert (row.attempt, row.claims) == (0, 0)
    assert row.run_id == answer.run_id
    assert row.enqueued_by is None
    assert (row.claimed_by, row.visible_at) == (None, None)


def test_a_job_without_key_or_tenant_writes_neither(pg_driver):
    """``tests.noop`` declares no key and no tenant: both columns stay NULL."""
    answer = noop.enqueue(anything=[1, "two", {"three": None}])
    row = Job.objects.get(id=answer.id)
    assert (row.idempotency_key, row.tenant_id) == (None, None)
    assert (row.queue, row.max_attempts) == ("default", 3)
    assert row.input == {"anything": [1, "two", {"three": None}]}


def test_each_enqueue_gets_its_own_id(pg_driver):
    """Two unkeyed enqueues are two rows."""
    first, second = noop.enqueue(), noop.enqueue()
    assert first.id != second.id
    assert job_count() == 2


def test_the_enqueued_signal_carries_the_answer(pg_driver):
    """``job_enqueued`` is sent with the handle and the answer."""
    received = []

    def receiver(sender, **kwargs):
        received.append(kwargs)

    job_enqueued.connect(receiver)
    try:
        answer = noop.enqueue()
    finally:
        job_enqueued.disconnect(receiver)
    assert received == [{"signal": job_enqueued, "job": noop, "enqueued": answer}]


# -- actor attribution -----------------------------------------------------------


def test_a_saved_user_as_actor_is_recorded_by_pk(pg_driver):
    """``using(actor=user)`` writes ``enqueued_by = "user:<pk>"``."""
    user = get_user_model().objects.create_user("ada")
    answer = noop.using(actor=user).enqueue()
    assert Job.objects.get(id=answer.id).enqueued_by == f"user:{user.pk}"


def test_a_string_actor_is_recorded_as_is(pg_driver):
    """``using(actor="cron:digest")`` writes that string."""
    answer = noop.using(actor="cron:digest").enqueue()
    assert Job.objects.get(id=answer.id).enqueued_by == "cron:digest"


def test_request_user_as_actor_is_recorded_as_a_user(pg_driver):
    """``request.user`` is a ``SimpleLazyObject``: still ``"user:<pk>"``.

    SPEC §1's own example passes ``actor=request.user``.
    """
    user = get_user_model().objects.create_user("grace")
    lazy_user = SimpleLazyObject(lambda: user)
    answer = noop.using(actor=lazy_user).enqueue()
    recorded = Job.objects.get(id=answer.id).enqueued_by
    assert recorded == f"user:{user.pk}", (
        f"BUG: actor=request.user (a SimpleLazyObject) was recorded as {recorded!r}; "
        "jobs._actor_id names the actor by type(actor), which is the lazy wrapper"
    )


def test_an_unsaved_user_as_actor_is_refused(pg_driver):
    """An actor without a pk is refused with ``X_JOB_INPUT_INVALID``."""
    with pytest.raises(JobInputInvalid) as caught:
        noop.using(actor=get_user_model()(username="unsaved")).enqueue()
    assert caught.value.code == "X_JOB_INPUT_INVALID"
    assert job_count() == 0


# -- when, where and how urgent ----------------------------------------------------


@pytest.mark.parametrize(
    "delay", ["10m", 600_000, timedelta(minutes=10)], ids=["text", "ms", "timedelta"]
)
def test_a_delay_makes_the_row_delayed_until_that_far_after_now(
    pg_driver, clock, delay
):
    """``using(delay="10m")``: state ``delayed``, ``run_at`` = now + 10 minutes."""
    answer = noop.using(delay=delay).enqueue()
    row = Job.objects.get(id=answer.id)
    assert row.state == "delayed"
    assert row.run_at == clock.now() + timedelta(minutes=10)
    assert row.created_at == clock.now()


def test_a_zero_delay_is_due_now(pg_driver, clock):
    """``using(delay=0)`` is a plain ready row."""
    row = Job.objects.get(id=noop.using(delay=0).enqueue().id)
    assert (row.state, row.run_at) == ("ready", clock.now())


def test_run_at_in_the_future_is_kept_exactly(pg_driver, clock):
    """``using(run_at=...)`` stores that instant; a future one is ``delayed``."""
    when = clock.now() + timedelta(days=2, microseconds=7)
    row = Job.objects.get(id=noop.using(run_at=when).enqueue().id)
    assert (row.state, row.run_at) == ("delayed", when)


def test_run_at_in_the_past_is_ready(pg_driver, clock):
    """A past ``run_at`` is due at once and keeps its instant (it sorts first)."""
    when = clock.now() - timedelta(hours=1)
    row = Job.objects.get(id=noop.using(run_at=when).enqueue().id)
    assert (row.state, row.run_at) == ("ready", when)


def test_priority_and_queue_options_override_the_declaration(pg_driver):
    """``using(priority=5, queue="slow")`` writes those."""
    answer = charge.using(priority=5, queue="slow").enqueue(invoice_id=1, org_id="a")
    row = Job.objects.get(id=answer.id)
    assert (row.priority, row.queue) == (5, "slow")


@pytest.mark.parametrize("priority", [-100, 100])
def test_priority_bounds_are_accepted(pg_driver, priority):
    """-100 and 100 are stored as given."""
    answer = noop.using(priority=priority).enqueue()
    assert Job.objects.get(id=answer.id).priority == priority


BAD_USING = [
    ({"run_at": datetime(2031, 1, 1, tzinfo=UTC), "delay": "1m"}, "not both"),
    ({"run_at": datetime(2031, 1, 1, 12, 0)}, "timezone-aware"),
    ({"run_at": "2031-01-01T12:00:00+00:00"}, "timezone-aware"),
    ({"delay": "soon"}, "not a duration"),
    ({"delay": -1}, "zero or more"),
    ({"delay": float("inf")}, "not a float"),
    ({"priority": 101}, "priority must be"),
    ({"priority": -101}, "priority must be"),
    ({"priority": True}, "priority must be"),
    ({"queue": ""}, "queue must be"),
    ({"queue": " slow"}, "queue must be"),
    ({"on_conflict": "ignore"}, "on_conflict must be"),
    ({"idempotency_key": ""}, "non-empty string"),
    ({"idempotency_key": "k" * 513}, "longer than 512"),
    ({"tenant_id": ""}, "non-empty string"),
    ({"actor": object()}, "actor must be"),
    ({"outbox": "yes"}, "outbox must be"),
]


@pytest.mark.parametrize(
    ("options", "fragment"), BAD_USING, ids=[repr(o) for o, _ in BAD_USING]
)
def test_bad_options_are_refused_before_anything_is_written(
    pg_driver, options, fragment
):
    """Both run_at and delay, a naive run_at, a bad delay/priority/queue...: refused."""
    with pytest.raises(JobInputInvalid) as caught:
        noop.using(**options).enqueue()
    assert caught.value.code == "X_JOB_INPUT_INVALID"
    assert fragment in caught.value.cause
    assert job_count() == 0


@pytest.mark.parametrize(
    "options",
    [
        {"delay": 10**20},
        {"delay": timedelta.max},
        {"delay": "300000000d"},
        {"delay": "99999999d"},
        {"delay": "36501d"},
        {"run_at": datetime.now(UTC) + timedelta(days=36_501)},
        {"run_at": datetime.max.replace(tzinfo=UTC)},
    ],
    ids=repr,
)
def test_a_run_time_past_100_years_is_refused_and_the_transaction_survives(
    pg_driver, options
):
    """A delay over 36500d or a run_at over 100 years ahead: ``X_JOB_INPUT_INVALID``
    before any statement, so the caller's transaction is not aborted by an
    ``interval out of range`` and its next write lands."""
    with transaction.atomic():
        with pytest.raises(JobInputInvalid) as caught:
            noop.using(**options).enqueue(n=1)
        assert "36500" in caught.value.cause and "36500" in caught.value.fix
        assert job_count() == 0
        noop.enqueue(n=2)
    assert job_count() == 1


def test_the_longest_delay_is_stored(pg_driver, clock):
    """``delay="36500d"`` is the bound itself: accepted, exactly that far ahead."""
    row = Job.objects.get(id=noop.using(delay="36500d").enqueue(n=1).id)
    assert row.run_at == clock.now() + timedelta(days=36_500)


def test_an_unknown_using_option_is_coded_and_still_a_type_error(pg_driver):
    """``using(bogus=1)``: ``X_JOB_INPUT_INVALID`` naming it and the options
    there are; ``except TypeError`` written for the plain call still catches it."""
    with pytest.raises(TypeError) as caught:
        noop.using(bogus=1, delay="1m")  # type: ignore[call-arg]
    error = caught.value
    assert isinstance(error, JobInputInvalid) and error.code == "X_JOB_INPUT_INVALID"
    assert error.cause.startswith("unknown option 'bogus'; options are run_at, delay")
    assert error.meta == {"unknown": ["bogus"]}
    assert job_count() == 0


@pytest.mark.parametrize("bad", [5, None, "n=1", [("n", 1)]], ids=repr)
def test_a_batch_item_that_is_not_a_dict_is_refused_naming_it(pg_driver, bad):
    """``enqueue_many([{...}, 5])`` is ``X_JOB_INPUT_INVALID`` for item 1, not an
    ``AttributeError``; nothing is written."""
    with pytest.raises(JobInputInvalid) as caught:
        noop.enqueue_many([{"n": 1}, bad])
    error = caught.value
    assert error.cause.startswith(
        "item 1 of the batch: tests.noop input must be a dict"
    )
    assert error.meta["index"] == 1
    assert job_count() == 0


@pytest.mark.parametrize("inputs", [{"n": 1}, "n", 5], ids=repr)
def test_a_batch_that_is_not_a_list_is_refused(pg_driver, inputs):
    """A dict, a string or a number instead of a list of dicts: refused whole."""
    with pytest.raises(JobInputInvalid, match="enqueue_many\\(\\) takes a list"):
        noop.enqueue_many(inputs)
    assert job_count() == 0


# -- idempotency -----------------------------------------------------------------


def test_a_live_key_dedupes_onto_its_holder(pg_driver):
    """The second enqueue answers the first row (``deduped=True``); one row kept."""
    first = charge.enqueue(invoice_id=1, org_id="acme", amount=1)
    second = charge.enqueue(invoice_id=1, org_id="acme", amount=2)
    assert second == Enqueued(first.id, first.run_id, True)
    assert job_count() == 1
    assert Job.objects.get(id=first.id).input["amount"] == 1


def test_on_conflict_error_raises_naming_the_holder(pg_driver):
    """``on_conflict="error"`` raises ``X_JOB_DUPLICATE`` with the holder's id."""
    first = charge.enqueue(invoice_id=1, org_id="acme")
    with pytest.raises(JobDuplicate) as caught:
        charge.using(on_conflict="error").enqueue(invoice_id=1, org_id="acme")
    assert caught.value.code == "X_JOB_DUPLICATE"
    assert caught.value.meta["holder"] == str(first.id)
    assert job_count() == 1


def test_the_same_key_in_another_tenant_is_another_job(pg_driver):
    """Keys are unique per tenant: acme's ``charge:1`` is not globex's."""
    acme = charge.enqueue(invoice_id=1, org_id="acme")
    globex = charge.enqueue(invoice_id=1, org_id="globex")
    assert globex.deduped is False and globex.id != acme.id
    assert job_count() == 2


def test_the_same_key_of_another_job_name_is_another_job(pg_driver, local_jobs):
    """Keys are unique per job name: ``charge:1`` of a refund is not the charge's."""
    charged = charge.enqueue(invoice_id=1, org_id="acme")
    refunded = local_jobs.refund.enqueue(invoice_id=1, org_id="acme")
    assert refunded.deduped is False and refunded.id != charged.id
    assert (
        Job.objects.get(id=refunded.id).idempotency_key
        == Job.objects.get(id=charged.id).idempotency_key
    )


def test_tenantless_keys_share_one_namespace(pg_driver):
    """Without a tenant (NULL), a key still dedupes."""
    first = noop.using(idempotency_key="nightly").enqueue()
    second = noop.using(idempotency_key="nightly").enqueue()
    assert second == Enqueued(first.id, first.run_id, True)


def test_a_key_given_at_the_call_wins_over_the_declared_one(pg_driver):
    """``using(idempotency_key=...)`` replaces the derived key."""
    answer = charge.using(idempotency_key="manual-7").enqueue(invoice_id=1, org_id="a")
    assert Job.objects.get(id=answer.id).idempotency_key == "manual-7"


def test_a_tenant_given_at_the_call_is_the_row_tenant_and_namespace(pg_driver):
    """``using(tenant_id=...)`` is written and scopes the key."""
    declared = charge.enqueue(invoice_id=1, org_id="acme")
    override = charge.using(tenant_id="reseller").enqueue(invoice_id=1, org_id="acme")
    assert override.deduped is False
    assert Job.objects.get(id=override.id).tenant_id == "reseller"
    assert Job.objects.get(id=declared.id).tenant_id == "acme"


def test_a_running_job_still_holds_its_key(pg_driver):
    """Running is live: an enqueue of its key dedupes onto it."""
    first = charge.enqueue(invoice_id=1, org_id="acme")
    claim_one(pg_driver, "billing")
    again = charge.enqueue(invoice_id=1, org_id="acme")
    assert again == Enqueued(first.id, first.run_id, True)


def test_a_finished_jobs_key_can_be_used_again(pg_driver):
    """After the holder is acked (done), the same key enqueues a new job."""
    first = charge.enqueue(invoice_id=1, org_id="acme")
    claimed = claim_one(pg_driver, "billing")
    assert pg_driver.ack(AckRequest(job_id=claimed.id, identity=claimed.identity))

    again = charge.enqueue(invoice_id=1, org_id="acme")
    assert again.deduped is False and again.id != first.id
    assert Job.objects.get(id=first.id).state == "done"
    assert Job.objects.get(id=again.id).state == "ready"
    assert job_count() == 2


def test_a_cancelled_jobs_key_can_be_used_again(pg_driver):
    """Cancelled is finished: its key is free."""
    first = charge.enqueue(invoice_id=1, org_id="acme")
    pg_driver.cancel(first.id)
    again = charge.using(on_conflict="error").enqueue(invoice_id=1, org_id="acme")
    assert again.deduped is False and again.id != first.id


# -- enqueue_many ----------------------------------------------------------------


def test_enqueue_many_answers_in_order(pg_driver, clock):
    """One answer per input, in order, each a new row with that input."""
    answers = noop.enqueue_many([{"n": n} for n in range(5)])
    assert [a.deduped for a in answers] == [False] * 5
    assert len({a.id for a in answers}) == 5
    rows = {row.id: row for row in Job.objects.all()}
    assert [rows[a.id].input for a in answers] == [{"n": n} for n in range(5)]
    assert all(rows[a.id].run_id == a.run_id == a.id for a in answers)
    assert {(row.state, row.run_at) for row in rows.values()} == {
        ("ready", clock.now())
    }


def test_enqueue_many_of_one_priority_is_claimed_in_list_order(pg_driver):
    """FIFO: the rows of one batch share run_at and priority, so ids decide.

    Two UUIDv7 of one millisecond used to be in random order (a batch of
    three ran 2, 1, 0); the ids a process draws now only grow.
    """
    answers = noop.enqueue_many([{"n": n} for n in range(30)])
    claimed = pg_driver.claim(
        ClaimOptions(queues=["default"], limit=30, worker_id="w", visibility_ms=30_000)
    ).claimed
    assert [c.input["n"] for c in claimed] == list(range(30))
    assert [c.id for c in claimed] == [a.id for a in answers]


def test_enqueue_many_of_nothing_is_nothing(pg_driver):
    """An empty batch answers ``[]``."""
    assert noop.enqueue_many([]) == []


def test_enqueue_many_writes_the_same_columns_as_enqueue(pg_driver, clock):
    """Queue, priority, attempts, key, tenant, actor and delay are applied per row."""
    user = get_user_model().objects.create_user("linus")
    (answer,) = charge.using(delay="10m", priority=-3, actor=user).enqueue_many(
        [{"invoice_id": 4, "org_id": "acme"}]
    )
    row = Job.objects.get(id=answer.id)
    assert (row.name, row.queue, row.priority, row.max_attempts) == (
        "tests.charge",
        "billing",
        -3,
        5,
    )
    assert (row.idempotency_key, row.tenant_id) == ("charge:4", "acme")
    assert row.enqueued_by == f"user:{user.pk}"
    assert (row.state, row.run_at) == ("delayed", clock.now() + timedelta(minutes=10))


def test_duplicates_inside_a_batch_resolve_to_the_first(pg_driver):
    """The third input repeats the first's key: it answers the first row, deduped."""
    answers = charge.enqueue_many(
        [
            {"invoice_id": 1, "org_id": "acme", "amount": 1},
            {"invoice_id": 2, "org_id": "acme", "amount": 2},
            {"invoice_id": 1, "org_id": "acme", "amount": 3},
        ]
    )
    assert [a.deduped for a in answers] == [False, False, True]
    assert answers[2] == Enqueued(answers[0].id, answers[0].run_id, True)
    assert job_count() == 2
    assert Job.objects.get(id=answers[0].id).input["amount"] == 1


def test_a_batch_dedupes_onto_an_existing_live_holder(pg_driver):
    """An input whose key is already live answers that holder."""
    holder = charge.enqueue(invoice_id=1, org_id="acme")
    answers = charge.enqueue_many(
        [{"invoice_id": 2, "org_id": "acme"}, {"invoice_id": 1, "org_id": "acme"}]
    )
    assert answers[0].deduped is False
    assert answers[1] == Enqueued(holder.id, holder.run_id, True)
    assert job_count() == 2


def test_a_duplicate_inside_a_batch_under_on_conflict_error_writes_nothing(pg_driver):
    """``X_JOB_DUPLICATE`` and not one row of the batch is kept."""
    with pytest.raises(JobDuplicate) as caught:
        charge.using(on_conflict="error").enqueue_many(
            [
                {"invoice_id": 1, "org_id": "acme"},
                {"invoice_id": 2, "org_id": "acme"},
                {"invoice_id": 1, "org_id": "acme"},
            ]
        )
    assert caught.value.code == "X_JOB_DUPLICATE"
    # It names the two items, not a holder that was never committed.
    assert caught.value.meta == {"job": charge.name, "index": 2, "first": 0}
    assert "items 0 and 2 of the batch" in caught.value.cause
    assert job_count() == 0


def test_a_batch_meeting_a_live_holder_under_on_conflict_error_writes_nothing(
    pg_driver,
):
    """Only the earlier holder remains; the batch's fresh rows are rolled back."""
    holder = charge.enqueue(invoice_id=9, org_id="acme")
    with pytest.raises(JobDuplicate) as caught:
        charge.using(on_conflict="error").enqueue_many(
            [{"invoice_id": n, "org_id": "acme"} for n in (1, 2, 9, 3)]
        )
    assert caught.value.meta["holder"] == str(holder.id)
    assert list(Job.objects.values_list("id", flat=True)) == [holder.id]


def test_one_bad_input_refuses_the_whole_batch(pg_driver):
    """Every input is checked first: one refusal writes nothing."""
    with pytest.raises(JobInputInvalid):
        charge.enqueue_many(
            [
                {"invoice_id": 1, "org_id": "acme"},
                {"invoice_id": 2, "org_id": "acme", "coupon": SECRET},
            ]
        )
    assert job_count() == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"invoice_id": 2, "org_id": "acme", "coupon": SECRET},
        {"invoice_id": 2, "org_id": f"{SECRET}\x00"},
        {"invoice_id": 2, "org_id": ""},
    ],
    ids=["signature", "nul", "empty-tenant"],
)
def test_a_refused_batch_names_the_item(pg_driver, bad):
    """The refusal says which input, counting from 0, in the message and meta."""
    good = [{"invoice_id": n, "org_id": "acme"} for n in (1, 3, 4)]
    with pytest.raises(JobInputInvalid) as caught:
        charge.enqueue_many([*good[:2], bad, good[2]])
    error = caught.value
    assert error.cause.startswith("item 2 of the batch: ")
    assert error.meta["index"] == 2 and error.meta["job"] == "tests.charge"
    assert SECRET not in error.render() and SECRET not in repr(error.meta)
    assert job_count() == 0


# -- refused input -----------------------------------------------------------------


BAD_INPUTS = [
    (
        "datetime",
        {"invoice_id": 1, "org_id": "acme", "amount": datetime(2031, 5, 6, 7, 8, 9)},
        ["2031", "05-06", "07:08"],
    ),
    ("tuple", {"invoice_id": (4111, 1111), "org_id": "acme"}, ["4111"]),
    ("set", {"invoice_id": {4111}, "org_id": "acme"}, ["4111"]),
    ("int-dict-key", {"invoice_id": 1, "org_id": {4111: SECRET}}, [SECRET, "4111"]),
    ("nan", {"invoice_id": 1, "org_id": "acme", "amount": float("nan")}, ["nan"]),
    ("inf", {"invoice_id": 1, "org_id": "acme", "amount": float("inf")}, ["inf"]),
    ("nested-inf", {"invoice_id": 1, "org_id": ["a", {"b": -float("inf")}]}, ["inf"]),
    (
        "unknown-keyword",
        {"invoice_id": 1, "org_id": "acme", "coupon": SECRET},
        [SECRET],
    ),
    ("missing-keyword", {"org_id": SECRET}, [SECRET]),
    ("nul", {"invoice_id": 1, "org_id": f"{SECRET}\x00"}, [SECRET]),
    ("nul-in-key", {"invoice_id": 1, "org_id": {"a\x00b": 1}}, ["a\x00b"]),
    ("lone-surrogate", {"invoice_id": 1, "org_id": f"{SECRET}\ud800"}, [SECRET]),
]


@pytest.mark.parametrize(
    ("given", "leaks"),
    [(given, leaks) for _, given, leaks in BAD_INPUTS],
    ids=[kind for kind, _, _ in BAD_INPUTS],
)
def test_bad_input_is_refused_without_writing_or_echoing_it(pg_driver, given, leaks):
    """Not JSON-safe or not matching the signature: ``X_JOB_INPUT_INVALID``, no row.

    The error's cause names the problem (and keyword names), never the value.
    """
    assert_refused_unechoed(given, leaks)
    assert job_count() == 0


def assert_refused_unechoed(given: dict, leaks: list[str]) -> None:
    """``charge.enqueue(**given)`` is ``X_JOB_INPUT_INVALID``, naming none of
    ``leaks`` (shared with the Redis driver's test of the same table)."""
    with pytest.raises(JobInputInvalid) as caught:
        charge.enqueue(**given)
    error = caught.value
    assert error.code == "X_JOB_INPUT_INVALID"
    assert error.cause.startswith("tests.charge input")
    for text in leaks:
        assert text not in error.cause and text not in repr(error.meta), text


PLACED = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("org_id", "path", "says"),
    [
        (
            {"order": {"id": 7, "placed_at": PLACED}},
            "org_id.order.placed_at",
            "is not JSON-safe: org_id.order.placed_at is a value of type datetime",
        ),
        (
            {"items": [{"at": "x"}, {"at": "y"}, {"at": PLACED}]},
            "org_id.items[2].at",
            "is not JSON-safe: org_id.items[2].at is a value of type datetime",
        ),
        (
            {"a b": [float("nan")]},
            'org_id["a b"][0]',
            'is not JSON-safe: org_id["a b"][0] is a non-finite number',
        ),
        (
            {"pair": (1, 2)},
            "org_id.pair",
            "changes in a JSON round trip: org_id.pair is a tuple, "
            "which JSON reads back as a list",
        ),
        (
            {"by_id": {4111: "x"}},
            "org_id.by_id",
            "changes in a JSON round trip: org_id.by_id has a key of type int",
        ),
        (
            {"note": "ok", "bad": "nul\x00"},
            "org_id.bad",
            "contains a NUL character, which JSON columns cannot store (in org_id.bad)",
        ),
    ],
    ids=["datetime", "list-index", "odd-key-nan", "tuple", "int-key", "nul"],
)
def test_a_refused_value_is_named_by_its_path(pg_driver, org_id, path, says):
    """The refusal says where the value sits (``order.placed_at``,
    ``items[2].at``): it said only "a value of type datetime", though the docs
    promised the argument's name. ``meta["path"]`` carries the path too."""
    with pytest.raises(JobInputInvalid) as caught:
        charge.enqueue(invoice_id=1, org_id=org_id)
    error = caught.value
    assert error.cause.startswith(f"tests.charge input {says}"), error.cause
    assert error.meta["path"] == path
    assert "2031" not in error.render() and "4111" not in error.render()
    assert job_count() == 0


def test_a_refused_batch_item_keeps_its_path(pg_driver):
    """enqueue_many: the item's index and the path inside it."""
    good = {"invoice_id": 1, "org_id": "acme"}
    with pytest.raises(JobInputInvalid) as caught:
        charge.enqueue_many([good, {"invoice_id": 2, "org_id": [PLACED]}])
    error = caught.value
    assert error.cause == (
        "item 1 of the batch: tests.charge input is not JSON-safe: "
        "org_id[0] is a value of type datetime"
    )
    assert (error.meta["index"], error.meta["path"]) == (1, "org_id[0]")
    assert job_count() == 0


def test_unknown_and_missing_keywords_are_named(pg_driver):
    """The refusal lists the keyword names."""
    with pytest.raises(JobInputInvalid) as caught:
        charge.enqueue(org_id="acme", coupon="X")
    assert caught.value.meta["missing"] == ["invoice_id"]
    assert caught.value.meta["unknown"] == ["coupon"]


@pytest.mark.parametrize("kind", ["pydantic", "dataclass", "callable"])
def test_an_input_schema_refusal_writes_nothing_and_hides_the_value(
    pg_driver, local_jobs, kind
):
    """A pydantic model, a dataclass and a callable each refuse ``amount=SECRET``."""
    handle = getattr(local_jobs, kind)
    assert handle.enqueue(invoice_id=1, amount=2).deduped is False
    before = job_count()
    with pytest.raises(JobInputInvalid) as caught:
        handle.enqueue(invoice_id=1, amount=SECRET)
    error = caught.value
    assert error.code == "X_JOB_INPUT_INVALID"
    assert "refused by its input_schema" in error.cause
    assert SECRET not in error.render() and SECRET not in repr(error.meta)
    assert job_count() == before


def test_the_pydantic_refusal_names_the_field_and_the_kind(pg_driver, local_jobs):
    """The summary says where and what (``amount: int_parsing``), not the value."""
    with pytest.raises(JobInputInvalid) as caught:
        local_jobs.pydantic.enqueue(invoice_id=1, amount=SECRET)
    assert "amount: int_parsing" in caught.value.cause


UNSTORABLE_TEXT_OPTIONS = [
    {"idempotency_key": "key\x00"},
    {"idempotency_key": "key\ud800"},
    {"tenant_id": "acme\x00"},
    {"tenant_id": "acme\ud800"},
    {"actor": "cron\x00"},
    {"actor": "cron\ud800"},
]


@pytest.mark.parametrize("options", UNSTORABLE_TEXT_OPTIONS, ids=repr)
def test_text_options_postgres_cannot_store_are_refused_with_a_code(pg_driver, options):
    """A NUL or a lone surrogate in a key, tenant or actor: ``X_JOB_INPUT_INVALID``.

    PostgreSQL text columns hold neither; the refusal must come before the
    insert, coded like every other refusal, with nothing written.
    """
    try:
        noop.using(**options).enqueue()
    except JobInputInvalid:
        pass
    except Exception as error:
        pytest.fail(
            f"BUG: using({options!r}).enqueue() raised {type(error).__name__} "
            f"({error}) instead of X_JOB_INPUT_INVALID"
        )
    else:
        pytest.fail(f"using({options!r}).enqueue() was accepted")
    assert job_count() == 0


@pytest.mark.parametrize("depth", [101, 10_000])
def test_an_input_nested_past_the_limit_is_refused_with_a_code(pg_driver, depth):
    """Past 100 levels (the top-level input counts): ``X_JOB_INPUT_INVALID``.

    At 10,000 levels the JSON encoder itself used to raise a bare
    ``RecursionError`` into the caller.
    """
    with pytest.raises(JobInputInvalid) as caught:
        noop.enqueue(tree=nested(depth - 1))
    assert "more than 100 levels deep" in caught.value.cause
    assert job_count() == 0


def test_an_input_nested_to_the_limit_is_stored_and_read_back(pg_driver):
    """Exactly 100 levels is accepted, stored by jsonb and decoded unchanged."""
    answer = noop.enqueue(tree=nested(99))
    assert Job.objects.get(id=answer.id).input == {"tree": nested(99)}


def test_many_brackets_inside_strings_are_not_mistaken_for_depth(pg_driver):
    """The depth is the value's, not the count of brackets in its text."""
    answer = noop.enqueue(text="[{" * 500, items=[[1]] * 500)
    assert Job.objects.get(id=answer.id).input["text"] == "[{" * 500


def test_key_and_tenant_limits_are_utf8_bytes_and_the_maximum_fits_the_index(
    pg_driver,
):
    """512 bytes each, with the longest name: stored, and the key dedupes.

    The live-key unique index spans name, tenant and key; at their limits
    the row fits a btree entry whatever the script.
    """
    handle = job(name=four_byte_text(200))(lambda ctx: None)
    try:
        options = {
            "idempotency_key": four_byte_text(128, seed=1),
            "tenant_id": four_byte_text(128, seed=2),
        }
        first = handle.using(**options).enqueue()
        again = handle.using(**options).enqueue()
        assert again == Enqueued(first.id, first.run_id, True)
        row = Job.objects.get(id=first.id)
        assert (row.idempotency_key, row.tenant_id) == (
            options["idempotency_key"],
            options["tenant_id"],
        )
    finally:
        unregister(handle.name)


@pytest.mark.parametrize("option", ["idempotency_key", "tenant_id", "actor"])
def test_text_past_512_utf8_bytes_is_refused_though_under_512_characters(
    pg_driver, option
):
    """129 four-byte characters (516 bytes): ``X_JOB_INPUT_INVALID``, no row.

    Counted in characters, a 512-character key and tenant failed inside the
    unique index (``index row size ... exceeds btree maximum``) and aborted
    the caller's transaction.
    """
    with pytest.raises(JobInputInvalid) as caught:
        noop.using(**{option: four_byte_text(129)}).enqueue()
    assert "longer than 512 bytes in UTF-8" in caught.value.cause
    assert job_count() == 0


def test_512_character_key_and_tenant_of_four_byte_characters_leave_the_transaction_usable(
    pg_driver,
):
    """The issue's case: refused before the insert, the transaction goes on."""
    from django.db import transaction

    with transaction.atomic():
        with pytest.raises(JobInputInvalid):
            noop.using(
                idempotency_key=four_byte_text(512, seed=1),
                tenant_id=four_byte_text(512, seed=2),
            ).enqueue()
        assert noop.enqueue(n=1).deduped is False
    assert job_count() == 1


def test_an_input_key_named_like_the_context_parameter_is_refused(pg_driver):
    """``handler(ctx, **input)`` with ``ctx=...``: refused at enqueue, not a
    ``TypeError`` on every attempt."""
    with pytest.raises(JobInputInvalid) as caught:
        noop.enqueue(ctx=1)
    error = caught.value
    assert "ctx is the handler's context parameter" in error.cause
    assert error.meta["reserved"] == ["ctx"]
    assert job_count() == 0


def test_a_positional_only_context_leaves_its_name_free_for_input(pg_driver):
    """``def handler(ctx, /, **input)``: ``ctx`` can only be the context."""
    handle = job(name="tests.enqueue.positional-ctx")(lambda ctx, /, **input: input)
    try:
        assert handle.enqueue(ctx=1).deduped is False
    finally:
        unregister(handle.name)


def test_an_empty_derived_key_is_refused(pg_driver, local_jobs):
    """``idempotency_key=`` returning ``""`` is refused; nothing written."""
    with pytest.raises(JobInputInvalid) as caught:
        local_jobs.empty_key.enqueue(invoice_id=1, amount=1)
    assert "idempotency_key of tests.enqueue.empty-key" in caught.value.cause
    assert job_count() == 0


def test_a_key_function_that_raises_is_refused_without_its_message(
    pg_driver, local_jobs
):
    """The deriver's exception type is named, its message (with the value) is not."""
    with pytest.raises(JobInputInvalid) as caught:
        local_jobs.raising_key.enqueue(invoice_id=4111, amount=1)
    error = caught.value
    assert "raised ValueError" in error.cause
    assert "4111" not in error.render()
    assert job_count() == 0


def test_an_empty_derived_tenant_is_refused(pg_driver, local_jobs):
    """``tenant=`` returning ``""`` is refused; nothing written."""
    with pytest.raises(JobInputInvalid) as caught:
        local_jobs.empty_tenant.enqueue(invoice_id=1, amount=1)
    assert "tenant of tests.enqueue.empty-tenant" in caught.value.cause
    assert job_count() == 0


# -- cost ----------------------------------------------------------------------------


def _plan_nodes(node):
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def _the_statement(pg_driver, monkeypatch, call) -> tuple[str, dict]:
    """The name and parameters of the one statement ``call`` ran."""
    calls = []
    original = pg_driver._rows

    def spy(name, params):
        calls.append((name, dict(params)))
        return original(name, params)

    monkeypatch.setattr(pg_driver, "_rows", spy)
    call()
    monkeypatch.undo()
    ((name, params),) = calls
    return name, params


def _wake_check_reads(pg_driver, clock, monkeypatch) -> tuple[int, list[str]]:
    """Enqueue one due job one second later; answer the job-table rows it read.

    Counts every row a scan of the job table returned or filtered away, per
    loop (a join filter only drops rows its inner scan already returned; the
    insert itself is the ModifyTable node), and names the indexes read.
    """
    clock.advance(seconds=1)
    name, params = _the_statement(pg_driver, monkeypatch, noop.enqueue)
    clock.advance(seconds=1)
    fresh = uuid7()
    params.update(id=fresh, run_id=fresh)

    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query(name),
            {"now": clock.sql_now(), **params},
        )
        (plan,) = cursor.fetchone()[0]
    read, scans = 0, set()
    for node in _plan_nodes(plan["Plan"]):
        if (
            node.get("Relation Name") == "ultimate_jobs_job"
            and node["Node Type"] != "ModifyTable"
        ):
            rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            if rows:
                read += rows * node.get("Actual Loops", 1)
                scans.add(node.get("Index Name", node["Node Type"]))
    return read, sorted(scans)


def test_the_wake_check_reads_only_the_current_slot(pg_driver, clock, monkeypatch):
    """With 2,000 ready rows from earlier slots, the silence check reads none of them.

    The check asks "is a ready row of this queue from the current 250 ms
    slot still waiting?"; answering it by walking the queue's whole backlog
    makes every enqueue cost grow with the queue's depth.
    """
    noop.enqueue_many([{"n": n} for n in range(2_000)])
    read, scans = _wake_check_reads(pg_driver, clock, monkeypatch)
    assert read < 50, (
        f"BUG: the job_enqueue wake check read {read} rows of earlier slots "
        f"(through {scans}) to enqueue one job; its cost grows with the backlog"
    )


def test_the_wake_check_reads_only_the_current_slot_during_a_burst(
    pg_driver, clock, monkeypatch
):
    """Statistics from an empty queue, then 2,000 enqueues: still none read.

    A queue that drains to zero is analyzed empty; the next burst arrives
    before autovacuum's next visit (up to a minute). The check must not walk
    the burst's backlog then either, or the burst itself slows down.
    """
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ultimate_jobs_job")
    noop.enqueue_many([{"n": n} for n in range(2_000)])
    read, scans = _wake_check_reads(pg_driver, clock, monkeypatch)
    assert read < 50, (
        f"BUG: before autovacuum re-analyzes, the job_enqueue wake check read "
        f"{read} rows of earlier slots (through {scans}) to enqueue one job: "
        "enqueue cost grows with the ready backlog (bench/enqueue.py (a))"
    )


def test_enqueue_many_reads_no_job_rows_for_new_ids(pg_driver, monkeypatch):
    """A batch of fresh ids does not read the job table to check them.

    Only a caller-allocated id (an outbox re-publish) can already exist.
    Checking every id of the batch was planned as an anti-join that hashed
    the whole job table on every call, so each enqueue_many cost grew with
    the table (bench/enqueue.py (c)).
    """
    noop.enqueue_many([{"n": n} for n in range(2_000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ultimate_jobs_job")
    name, params = _the_statement(
        pg_driver,
        monkeypatch,
        lambda: noop.enqueue_many([{"n": n} for n in range(100)]),
    )
    rows = json.loads(params["rows"])
    for row in rows:
        row["id"] = str(uuid7())
    params["rows"] = json.dumps(rows)

    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute("SAVEPOINT explain")
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query(name),
            {"now": pg_driver.clock.sql_now(), **params},
        )
        (plan,) = cursor.fetchone()[0]
        cursor.execute("ROLLBACK TO SAVEPOINT explain")
    read = sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
        * node.get("Actual Loops", 1)
        for node in _plan_nodes(plan["Plan"])
        if node.get("Relation Name") == "ultimate_jobs_job"
        and node["Node Type"] != "ModifyTable"
    )
    assert read < 50, (
        f"BUG: enqueue_many of 100 new jobs read {read} job rows "
        "(its cost grows with the job table)"
    )


def test_enqueue_after_the_connection_was_reopened(committed_pg_driver):
    """The driver keeps a cursor per thread: a reopened connection gets its own."""
    first = noop.enqueue()
    connection.close()
    second = noop.enqueue()
    batch = noop.enqueue_many([{}, {}])
    ids = {first.id, second.id, *(answer.id for answer in batch)}
    assert set(Job.objects.filter(id__in=ids).values_list("id", flat=True)) == ids
