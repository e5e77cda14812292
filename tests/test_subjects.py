"""Data subjects: declarations and personal_marks, the coverage check, export, erase
and its audit, on PostgreSQL through the real worker path (``run_jobs``).
The command and the admin pages: tests/test_subjects_command.py.

The test app's ``tests.customer`` subject (tests/jobsapp/jobs.py) covers
its Customer, Order and Review tables; each UPDATE or DELETE of one of
their rows writes a ``Touch`` row in the same transaction (a trigger), so
a row erased twice would show twice.
"""

from __future__ import annotations

import io
import json
import zipfile
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.db.models.signals import pre_delete

from django_ultimate_jobs.errors import JobDuplicate, JobsError
from django_ultimate_jobs.models import (
    ErasureRecord,
    Job,
    Step,
    SubjectExportPart,
    SubjectRequest,
)
from django_ultimate_jobs.subjects import (
    DELETE,
    EMPTY,
    NULL,
    REDACT,
    anonymize,
    erase_subject,
    export_subject,
    key_digest,
    mark_personal_data,
    personal_data,
    personal_data_problems,
    plan_subject,
    retain,
    subject,
    table,
    value,
)
from django_ultimate_jobs.subjects.declaration import registered_subjects
from tests.jobsapp.models import Customer, Order, Review, Touch
from tests.support.subjects import (
    drain,
    make_customer,
    nothing_requested,
    request_of,
)
from tests.support.workers import django_command

pytestmark = pytest.mark.django_db

# -- declarations and marks ----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "code", "words"),
    [
        (
            lambda: table("jobsapp.Nope", erase=DELETE),
            "X_SUBJECT_MODEL_UNKNOWN",
            "no installed app defines the model 'jobsapp.Nope'",
        ),
        (
            lambda: table(Order, by="buyer", erase=DELETE),
            "X_SUBJECT_FIELD_UNKNOWN",
            "has no foreign key or column 'buyer'",
        ),
        (
            lambda: table(Order, by="total__customer", erase=DELETE),
            "X_SUBJECT_FIELD_UNKNOWN",
            "which is not a foreign key",
        ),
        (
            lambda: table(Order, by="customer", erase=anonymize(address=REDACT)),
            "X_SUBJECT_FIELD_UNKNOWN",
            "jobsapp.Order has no field 'address'",
        ),
        (
            lambda: table(Customer, erase=anonymize(name=NULL)),
            "X_SUBJECT_DECLARATION_INVALID",
            "NULL needs a field declared null=True",
        ),
        (
            lambda: table(Customer, erase=anonymize(email=EMPTY)),
            "X_SUBJECT_DECLARATION_INVALID",
            "EMPTY on a unique field would collide",
        ),
        (
            lambda: table(Order, by="customer", erase=anonymize(total=REDACT)),
            "X_SUBJECT_DECLARATION_INVALID",
            "REDACT is for text fields",
        ),
        (
            lambda: table(Customer, erase=anonymize(email=value("x@y.invalid"))),
            "X_SUBJECT_DECLARATION_INVALID",
            "a constant on a unique field would collide",
        ),
        (
            lambda: table(Customer, erase=anonymize(id=NULL)),
            "X_SUBJECT_DECLARATION_INVALID",
            "a primary key cannot be anonymised",
        ),
        (
            lambda: table(Customer, erase="delete"),
            "X_SUBJECT_DECLARATION_INVALID",
            "must be anonymize(...), DELETE or retain('why')",
        ),
        (
            lambda: retain("  "),
            "X_SUBJECT_DECLARATION_INVALID",
            "retain() needs a reason",
        ),
        (
            lambda: mark_personal_data(Order, "adress"),
            "X_SUBJECT_FIELD_UNKNOWN",
            "has no field 'adress'",
        ),
        (
            lambda: personal_data("email"),
            "X_SUBJECT_DECLARATION_INVALID",
            "wraps a model field, not a str",
        ),
    ],
)
def test_a_bad_declaration_is_refused_with_a_code(make, code, words):
    with pytest.raises(JobsError) as refused:
        make()
    assert refused.value.code == code
    assert words in refused.value.cause


def test_a_bad_subject_is_refused_whole_and_nothing_is_registered():
    before = [s.name for s in registered_subjects()]
    review = table(Review, by="author", erase=DELETE)
    with pytest.raises(JobsError) as refused:
        subject(name=" padded", tables=[review, review], batch=0, storage="")
    assert refused.value.code == "X_SUBJECT_DECLARATION_INVALID"
    for words in (
        "name must be written without surrounding spaces",
        "each model is listed once; twice: jobsapp.Review",
        "storage must be a STORAGES alias or a callable",
        "batch must be a whole number from 1 to 10000",
    ):
        assert words in refused.value.cause
    assert [s.name for s in registered_subjects()] == before


def test_a_second_declaration_of_a_name_elsewhere_is_a_duplicate(declare_subject):
    declare_subject("t.subj.dup", [table(Review, by="author", erase=DELETE)])
    with pytest.raises(JobDuplicate):
        subject(name="t.subj.dup", tables=[table(Review, by="author", erase=DELETE)])


def test_marks_come_from_the_field_and_from_the_registry(personal_marks):
    from django_ultimate_jobs.subjects import personal_data_fields

    assert personal_data_fields(Customer) == {
        "email": "contact",
        "name": "identity",
        "phone": "contact",
    }
    personal_marks(Order, "total")
    assert personal_data_fields(Order) == {
        "shipping_address": "personal",
        "total": "personal",
    }


# -- the coverage check ------------------------------------------------------------------


def test_the_test_apps_marks_are_covered():
    assert personal_data_problems() == []
    call_command("check", stdout=StringIO())


def test_check_fails_for_a_marked_model_no_subject_lists(personal_marks):
    personal_marks(Touch, "tbl")
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    text = str(failed.value)
    assert "jobsapp.Touch: (ultimate_jobs.E201) X_PERSONAL_DATA_UNREACHED" in text
    assert "jobsapp.Touch.tbl holds personal data" in text


def test_check_fails_for_a_marked_field_its_subjects_erase_leaves(personal_marks):
    personal_marks(Order, "total")
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    text = str(failed.value)
    assert "jobsapp.Order: (ultimate_jobs.E202) X_PERSONAL_DATA_UNERASED" in text
    assert "leaves the personal data in jobsapp.Order.total as it is" in text


def test_manage_py_check_fails_for_a_test_app_with_an_uncovered_field():
    """A real ``manage.py check``, with an app whose model marks a field no
    subject covers (tests/privacyapp, installed by its own settings)."""
    done = django_command("check", "--settings", "tests.privacyapp.settings")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "privacyapp.Lead: (ultimate_jobs.E201) X_PERSONAL_DATA_UNREACHED" in (
        done.stderr
    )
    assert "privacyapp.Lead.email, privacyapp.Lead.name hold personal data" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


# -- refusals before anything is written ---------------------------------------------------


def test_requests_are_refused_with_a_code_and_write_nothing(
    memory_storage, personal_marks
):
    customer = make_customer()
    refusals = [
        (lambda: erase_subject("t.nope", customer.pk, requested_by="dpo"), "X_SUBJECT_UNKNOWN"),
        (lambda: erase_subject("tests.customer", "abc", requested_by="dpo"), "X_SUBJECT_KEY_INVALID"),
        (lambda: erase_subject("tests.customer", [1], requested_by="dpo"), "X_SUBJECT_KEY_INVALID"),
        (lambda: erase_subject("tests.customer", 2**70, requested_by="dpo"), "X_SUBJECT_KEY_INVALID"),
        (lambda: export_subject("tests.customer", 2**70), "X_SUBJECT_KEY_INVALID"),
        (lambda: export_subject("tests.customer", str(-(2**63) - 1)), "X_SUBJECT_KEY_INVALID"),
        (lambda: erase_subject("tests.customer", customer.pk, requested_by=" "), "X_SUBJECT_ARGUMENT_INVALID"),
        (lambda: erase_subject("tests.customer", customer.pk, requested_by=None), "X_SUBJECT_ARGUMENT_INVALID"),
        (lambda: export_subject("tests.customer", customer.pk, storage="nope"), "X_SUBJECT_STORAGE_INVALID"),
        (lambda: export_subject("tests.customer", customer.pk, storage=3), "X_SUBJECT_ARGUMENT_INVALID"),
    ]  # fmt: skip
    for make, code in refusals:
        with pytest.raises(JobsError) as refused:
            make()
        assert refused.value.code == code
        assert "ann1@example.com" not in str(refused.value)
    personal_marks(Order, "total")
    with pytest.raises(JobsError) as refused:
        erase_subject("tests.customer", customer.pk, requested_by="dpo")
    assert refused.value.code == "X_PERSONAL_DATA_UNERASED"
    assert nothing_requested()


# -- export ---------------------------------------------------------------------------------


def _archive(storage, name: str) -> dict[str, object]:
    with storage.open(name) as stored:
        with zipfile.ZipFile(io.BytesIO(stored.read())) as archive:
            return {n: json.loads(archive.read(n)) for n in archive.namelist()}


def test_an_export_writes_one_archive_of_every_table_in_pages(
    declare_subject, memory_storage, pg_driver
):
    customer = make_customer(orders=7, reviews=2)
    other = make_customer(2)
    declare_subject(
        "t.subj.export",
        [
            table(Review, by="author", erase=DELETE),
            table(Order, by="customer", erase=anonymize(shipping_address=REDACT)),
            table(
                Customer,
                erase=anonymize(email=REDACT, name=EMPTY, phone=NULL),
                export=["email", "name"],
            ),
        ],
        batch=3,
    )
    requested = export_subject("t.subj.export", customer.pk, requested_by="dpo")
    drain(pg_driver)

    row = request_of(requested)
    assert (row.state, row.rows_done, row.total, row.pages_done) == ("done", 10, 10, 5)
    assert row.archive == f"subject-exports/t.subj.export/{row.id}.zip"
    assert row.key is None and row.key_digest == key_digest(
        "t.subj.export", str(customer.pk)
    )
    files = _archive(memory_storage, row.archive)
    manifest = files.pop("manifest.json")
    assert sorted(files) == [
        "jobsapp.Customer.json",
        "jobsapp.Order.json",
        "jobsapp.Review.json",
    ]
    orders = files["jobsapp.Order.json"]
    assert [o["fields"]["shipping_address"] for o in orders] == [
        f"1 rue des Lilas #{i}" for i in range(7)
    ]
    assert {o["fields"]["customer"] for o in orders} == {customer.pk}
    assert files["jobsapp.Customer.json"] == [
        {
            "model": "jobsapp.customer",
            "pk": customer.pk,
            "fields": {"email": "ann1@example.com", "name": "Ann 1"},
        }
    ]
    assert manifest["subject"] == "t.subj.export" and manifest["key"] == customer.pk
    assert [(t["model"], t["rows"]) for t in manifest["tables"]] == [
        ("jobsapp.Review", 2),
        ("jobsapp.Order", 7),
        ("jobsapp.Customer", 1),
    ]
    assert manifest["tables"][2]["personal_data"] == {
        "email": "contact",
        "name": "identity",
        "phone": "contact",
    }
    assert "Ann 2" not in json.dumps(files)  # another subject's rows stay out
    assert not SubjectExportPart.objects.exists()  # the parts are dropped
    steps = Step.objects.filter(run_id=row.run_id).values_list("name", flat=True)
    assert sorted(steps) == sorted(
        ["start", "archive", "finish", "t0-page-0"]
        + [f"t1-page-{n}" for n in range(3)]
        + ["t2-page-0"]
    )
    assert other.email == Customer.objects.get(pk=other.pk).email


class RefusingStorage:
    """A storage that refuses writes (``refusing`` decides), as a full disk would."""

    refusing = True

    def __new__(cls):
        from django.core.files.storage import InMemoryStorage

        class Refusing(InMemoryStorage):
            def _save(self, name, content):
                if RefusingStorage.refusing:
                    raise PermissionError("read-only file system")
                return super()._save(name, content)

        return Refusing()


def test_a_storage_that_refuses_writes_fails_the_attempt_with_a_code(
    declare_subject, pg_driver, clock
):
    customer = make_customer()
    storage = RefusingStorage()
    declare_subject(
        "t.subj.refusing",
        [
            table(Review, by="author", erase=DELETE),
            table(Order, by="customer", erase=anonymize(shipping_address=REDACT)),
            table(Customer, erase=anonymize(email=REDACT, name=EMPTY, phone=NULL)),
        ],
        storage=lambda: storage,
    )
    RefusingStorage.refusing = True
    requested = export_subject("t.subj.refusing", customer.pk, requested_by="dpo")
    drain(pg_driver)

    job = Job.objects.get(id=requested.job_id)
    assert job.state == "ready" and job.attempt == 1  # retried on its schedule
    assert job.last_error.startswith(
        "X_SUBJECT_STORAGE_REFUSED: the Refusing storage refused to write the "
        "archive (PermissionError)"
    )
    row = request_of(requested)
    assert row.state == "running" and row.error.startswith("X_SUBJECT_STORAGE_REFUSED")

    RefusingStorage.refusing = False
    clock.advance(seconds=60)
    drain(pg_driver)
    row = request_of(requested)
    assert (row.state, row.error) == ("done", "")
    assert storage.exists(row.archive)
    assert Job.objects.get(id=requested.job_id).attempt == 2


# -- erase ------------------------------------------------------------------------------


def _touches() -> dict[tuple[str, str], int]:
    rows = Touch.objects.values("tbl", "op").annotate(n=Count("id"))
    return {(r["tbl"], r["op"]): r["n"] for r in rows}


def _touched_more_than_once() -> list[tuple[str, int]]:
    rows = (
        Touch.objects.values("tbl", "row_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("tbl", "row_id")
    )
    return list(rows)


def test_an_erase_treats_each_row_once_per_policy_and_audits_without_data(pg_driver):
    customer = make_customer(orders=1203, reviews=3)
    other = make_customer(2)
    requested = erase_subject(
        "tests.customer", customer.pk, requested_by="dpo@example.com, ticket 7"
    )
    drain(pg_driver)

    row = request_of(requested)
    assert (row.state, row.rows_done, row.total) == ("done", 1207, 1207)
    assert row.key is None
    customer.refresh_from_db()
    assert (customer.email, customer.name, customer.phone, customer.plan) == (
        f"erased-{customer.pk}@erased.invalid",
        "",
        None,
        "free",
    )
    assert set(Order.objects.filter(customer=customer).values_list(
        "shipping_address", flat=True
    )) == {"erased"}  # fmt: skip
    assert not Review.objects.filter(author=customer).exists()
    assert Review.objects.filter(author=other).count() == 2  # not theirs: untouched
    # Each row once: 1,203 orders updated, 3 reviews deleted, 1 customer.
    assert _touches() == {
        ("jobsapp_order", "UPDATE"): 1203,
        ("jobsapp_review", "DELETE"): 3,
        ("jobsapp_customer", "UPDATE"): 1,
    }
    assert _touched_more_than_once() == []
    assert row.summary == [
        {"model": "jobsapp.Customer", "field": "email", "policy": "redact", "rows": 1},
        {"model": "jobsapp.Customer", "field": "name", "policy": "empty", "rows": 1},
        {"model": "jobsapp.Customer", "field": "phone", "policy": "null", "rows": 1},
        {"model": "jobsapp.Order", "field": "shipping_address", "policy": "redact", "rows": 1203},
        {"model": "jobsapp.Review", "field": "*", "policy": "delete", "rows": 3},
    ]  # fmt: skip
    records = ErasureRecord.objects.filter(request=row)
    assert {r.requested_by for r in records} == {"dpo@example.com, ticket 7"}
    assert not records.filter(sweep=True).exists()
    # Never the data: not in the audit, the request, the job or its steps.
    stored = json.dumps(
        [
            list(records.values()),
            list(SubjectRequest.objects.filter(id=row.id).values()),
            list(Job.objects.filter(id=row.job_id).values("input", "result")),
            list(Step.objects.filter(run_id=row.run_id).values("output")),
        ],
        default=str,
    )
    for value_ in ("ann1@example.com", "Ann 1", "+33 6", "rue des Lilas"):
        assert value_ not in stored


def test_an_erase_of_an_erased_subject_finds_nothing_and_records_zero(pg_driver):
    customer = make_customer(orders=2, reviews=1)
    erase_subject("tests.customer", customer.pk, requested_by="dpo")
    drain(pg_driver)
    Touch.objects.all().delete()

    again = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    drain(pg_driver)
    row = request_of(again)
    assert (row.state, row.rows_done, row.summary) == ("done", 0, [])
    assert not Touch.objects.exists()


def test_rows_written_during_the_erase_are_caught_by_the_sweep(
    declare_subject, pg_driver
):
    """An order written while the reviews are deleted lands in a table walked
    already: the sweep treats it, and its record says so."""
    customer = make_customer(orders=2, reviews=1)
    declare_subject(
        "t.subj.sweep",
        [
            table(Order, by="customer", erase=anonymize(shipping_address=REDACT)),
            table(Review, by="author", erase=DELETE),
            table(Customer, erase=anonymize(email=REDACT, name=EMPTY, phone=NULL)),
        ],
    )

    def order_meanwhile(sender, instance, **kwargs):
        Order.objects.create(customer_id=instance.author_id, shipping_address="late")

    pre_delete.connect(order_meanwhile, sender=Review)
    try:
        erase_subject("t.subj.sweep", customer.pk, requested_by="dpo")
        drain(pg_driver)
    finally:
        pre_delete.disconnect(order_meanwhile, sender=Review)

    assert set(Order.objects.values_list("shipping_address", flat=True)) == {"erased"}
    late = ErasureRecord.objects.get(model="jobsapp.Order", sweep=True)
    assert (late.field, late.policy, late.rows) == ("shipping_address", "redact", 1)
    assert _touched_more_than_once() == []


def test_a_delete_that_cascades_is_recorded_per_model(declare_subject, pg_driver):
    customer = make_customer(orders=0, reviews=2)
    declare_subject(
        "t.subj.cascade",
        [
            table(Order, by="customer", erase=retain("kept 10 years (tax law)")),
            table(Customer, erase=DELETE),
            table(Review, by="author", erase=DELETE),
        ],
    )
    requested = erase_subject("t.subj.cascade", customer.pk, requested_by="dpo")
    drain(pg_driver)

    assert not Customer.objects.filter(pk=customer.pk).exists()
    assert request_of(requested).summary == [
        {"model": "jobsapp.Customer", "field": "*", "policy": "delete", "rows": 1},
        {"model": "jobsapp.Order", "field": "*", "policy": "retain: kept 10 years (tax law)", "rows": 0},
        {"model": "jobsapp.Review", "field": "*", "policy": "delete (cascade)", "rows": 2},
    ]  # fmt: skip


def test_a_delete_the_database_refuses_fails_terminally_with_a_code(
    declare_subject, pg_driver
):
    customer = make_customer(orders=2, reviews=0)
    declare_subject(
        "t.subj.blocked",
        [
            table(Customer, erase=DELETE),  # its orders PROTECT it
            table(Order, by="customer", erase=anonymize(shipping_address=REDACT)),
            table(Review, by="author", erase=DELETE),
        ],
    )
    requested = erase_subject("t.subj.blocked", customer.pk, requested_by="dpo")
    drain(pg_driver)

    job = Job.objects.get(id=requested.job_id)
    assert (job.state, job.attempt) == ("dead", 1)
    assert job.last_error.startswith(
        "X_SUBJECT_ERASE_BLOCKED: the database refused to erase rows of "
        "jobsapp.Customer (ProtectedError)"
    )
    row = request_of(requested)
    assert row.state == "failed" and row.error.startswith("X_SUBJECT_ERASE_BLOCKED")
    assert Customer.objects.filter(pk=customer.pk).exists()
    assert not ErasureRecord.objects.exists()
    # The command following it exits 1 with the code, not a traceback.
    from django_ultimate_jobs.management.commands.jobs_subject import Command

    with pytest.raises(CommandError, match="the erase failed: X_SUBJECT_ERASE_BLOCKED"):
        Command(stdout=StringIO())._follow(
            "erase", requested, {"no_follow": False, "subject": "t.subj.blocked"}
        )


def test_a_second_request_of_a_live_one_meets_it(pg_driver):
    customer = make_customer()
    first = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    second = erase_subject("tests.customer", str(customer.pk), requested_by="dpo")
    assert (second.request_id, second.job_id, second.deduped) == (
        first.request_id,
        first.job_id,
        True,
    )
    assert SubjectRequest.objects.count() == 1


def test_a_request_whose_job_was_cancelled_no_longer_blocks_a_new_one(pg_driver):
    from django_ultimate_jobs import operator

    customer = make_customer()
    first = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    operator.cancel(first.job_id)
    second = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    assert not second.deduped and second.request_id != first.request_id
    old = request_of(first)
    assert old.state == "failed" and "ended cancelled" in old.error


def test_the_audit_is_append_only_in_the_database(pg_driver):
    customer = make_customer(orders=1, reviews=0)
    erase_subject("tests.customer", customer.pk, requested_by="dpo")
    drain(pg_driver)
    for statement in (
        "UPDATE ultimate_jobs_erasure_record SET rows = 0",
        "DELETE FROM ultimate_jobs_erasure_record",
    ):
        with pytest.raises(DatabaseError), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement)
    assert ErasureRecord.objects.count() == 4


def test_the_plan_counts_rows_and_what_an_erase_would_change():
    customer = make_customer(orders=3, reviews=2)
    Order.objects.filter(customer=customer).update(shipping_address="erased")
    plans = plan_subject("tests.customer", customer.pk)
    assert [(p.model, p.rows, p.to_treat) for p in plans] == [
        ("jobsapp.Review", 2, 2),
        ("jobsapp.Order", 3, 0),
        ("jobsapp.Customer", 1, 1),
    ]
    assert plans[1].erase == "anonymize(shipping_address=redact)"
