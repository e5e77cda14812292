"""Data subjects: declarations and marks, export, erase and its audit, the
coverage check, ``manage.py jobs_subject`` and the admin pages, on
PostgreSQL through the real worker path (``run_jobs``).

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
    unmark_personal_data,
    unregister_subject,
    value,
)
from django_ultimate_jobs.subjects.declaration import registered_subjects
from django_ultimate_jobs.testing import run_jobs
from tests.jobsapp.models import Customer, Order, Review, Touch
from tests.support.terminal import terminal
from tests.support.workers import django_command

pytestmark = pytest.mark.django_db

MEMORY_STORAGE = {"BACKEND": "django.core.files.storage.InMemoryStorage"}


@pytest.fixture
def memory_storage(settings):
    """``STORAGES["default"]`` in memory; answers the storage."""
    from django.core.files.storage import storages

    settings.STORAGES = {**settings.STORAGES, "default": MEMORY_STORAGE}
    return storages["default"]


@pytest.fixture
def declare():
    """Declare subjects in a test; each is forgotten afterwards."""
    names: list[str] = []

    def make(name: str, tables, **options):
        subject(name=name, tables=tables, **options)
        names.append(name)
        return name

    yield make
    for name in names:
        unregister_subject(name)


@pytest.fixture
def marks():
    """Mark fields in a test; the marks are removed afterwards."""
    made: list[tuple[type, tuple[str, ...]]] = []

    def mark(model, *fields: str) -> None:
        mark_personal_data(model, *fields)
        made.append((model, fields))

    yield mark
    for model, fields in made:
        unmark_personal_data(model, *fields)


def _customer(n: int = 1, orders: int = 3, reviews: int = 2) -> Customer:
    customer = Customer.objects.create(
        email=f"ann{n}@example.com", name=f"Ann {n}", phone=f"+33 6 00 00 00 {n:02d}"
    )
    Order.objects.bulk_create(
        Order(customer=customer, shipping_address=f"{n} rue des Lilas #{i}", total=i)
        for i in range(orders)
    )
    Review.objects.bulk_create(
        Review(author=customer, body=f"review {i} by Ann {n}") for i in range(reviews)
    )
    return customer


def _drain(pg_driver):
    return run_jobs(queues=["ultimate_jobs"], driver=pg_driver)


def _request(requested) -> SubjectRequest:
    return SubjectRequest.objects.get(id=requested.request_id)


def _nothing_requested() -> bool:
    return (
        not SubjectRequest.objects.exists()
        and not Job.objects.filter(name__startswith="ultimate_jobs.subject.").exists()
    )


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


def test_a_second_declaration_of_a_name_elsewhere_is_a_duplicate(declare):
    declare("t.subj.dup", [table(Review, by="author", erase=DELETE)])
    with pytest.raises(JobDuplicate):
        subject(name="t.subj.dup", tables=[table(Review, by="author", erase=DELETE)])


def test_marks_come_from_the_field_and_from_the_registry(marks):
    from django_ultimate_jobs.subjects import personal_data_fields

    assert personal_data_fields(Customer) == {
        "email": "contact",
        "name": "identity",
        "phone": "contact",
    }
    marks(Order, "total")
    assert personal_data_fields(Order) == {
        "shipping_address": "personal",
        "total": "personal",
    }


# -- the coverage check ------------------------------------------------------------------


def test_the_test_apps_marks_are_covered():
    assert personal_data_problems() == []
    call_command("check", stdout=StringIO())


def test_check_fails_for_a_marked_model_no_subject_lists(marks):
    marks(Touch, "tbl")
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    text = str(failed.value)
    assert "jobsapp.Touch: (ultimate_jobs.E201) X_PERSONAL_DATA_UNREACHED" in text
    assert "jobsapp.Touch.tbl holds personal data" in text


def test_check_fails_for_a_marked_field_its_subjects_erase_leaves(marks):
    marks(Order, "total")
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


def test_requests_are_refused_with_a_code_and_write_nothing(memory_storage, marks):
    customer = _customer()
    refusals = [
        (lambda: erase_subject("t.nope", customer.pk, requested_by="dpo"), "X_SUBJECT_UNKNOWN"),
        (lambda: erase_subject("tests.customer", "abc", requested_by="dpo"), "X_SUBJECT_KEY_INVALID"),
        (lambda: erase_subject("tests.customer", [1], requested_by="dpo"), "X_SUBJECT_KEY_INVALID"),
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
    marks(Order, "total")
    with pytest.raises(JobsError) as refused:
        erase_subject("tests.customer", customer.pk, requested_by="dpo")
    assert refused.value.code == "X_PERSONAL_DATA_UNERASED"
    assert _nothing_requested()


# -- export ---------------------------------------------------------------------------------


def _archive(storage, name: str) -> dict[str, object]:
    with storage.open(name) as stored:
        with zipfile.ZipFile(io.BytesIO(stored.read())) as archive:
            return {n: json.loads(archive.read(n)) for n in archive.namelist()}


def test_an_export_writes_one_archive_of_every_table_in_pages(
    declare, memory_storage, pg_driver
):
    customer = _customer(orders=7, reviews=2)
    other = _customer(2)
    declare(
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
    _drain(pg_driver)

    row = _request(requested)
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
    declare, pg_driver, clock
):
    customer = _customer()
    storage = RefusingStorage()
    declare(
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
    _drain(pg_driver)

    job = Job.objects.get(id=requested.job_id)
    assert job.state == "ready" and job.attempt == 1  # retried on its schedule
    assert job.last_error.startswith(
        "X_SUBJECT_STORAGE_REFUSED: the Refusing storage refused to write the "
        "archive (PermissionError)"
    )
    row = _request(requested)
    assert row.state == "running" and row.error.startswith("X_SUBJECT_STORAGE_REFUSED")

    RefusingStorage.refusing = False
    clock.advance(seconds=60)
    _drain(pg_driver)
    row = _request(requested)
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
    customer = _customer(orders=1203, reviews=3)
    other = _customer(2)
    requested = erase_subject(
        "tests.customer", customer.pk, requested_by="dpo@example.com, ticket 7"
    )
    _drain(pg_driver)

    row = _request(requested)
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
    customer = _customer(orders=2, reviews=1)
    erase_subject("tests.customer", customer.pk, requested_by="dpo")
    _drain(pg_driver)
    Touch.objects.all().delete()

    again = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    _drain(pg_driver)
    row = _request(again)
    assert (row.state, row.rows_done, row.summary) == ("done", 0, [])
    assert not Touch.objects.exists()


def test_rows_written_during_the_erase_are_caught_by_the_sweep(declare, pg_driver):
    """An order written while the reviews are deleted lands in a table walked
    already: the sweep treats it, and its record says so."""
    customer = _customer(orders=2, reviews=1)
    declare(
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
        _drain(pg_driver)
    finally:
        pre_delete.disconnect(order_meanwhile, sender=Review)

    assert set(Order.objects.values_list("shipping_address", flat=True)) == {"erased"}
    late = ErasureRecord.objects.get(model="jobsapp.Order", sweep=True)
    assert (late.field, late.policy, late.rows) == ("shipping_address", "redact", 1)
    assert _touched_more_than_once() == []


def test_a_delete_that_cascades_is_recorded_per_model(declare, pg_driver):
    customer = _customer(orders=0, reviews=2)
    declare(
        "t.subj.cascade",
        [
            table(Order, by="customer", erase=retain("kept 10 years (tax law)")),
            table(Customer, erase=DELETE),
            table(Review, by="author", erase=DELETE),
        ],
    )
    requested = erase_subject("t.subj.cascade", customer.pk, requested_by="dpo")
    _drain(pg_driver)

    assert not Customer.objects.filter(pk=customer.pk).exists()
    assert _request(requested).summary == [
        {"model": "jobsapp.Customer", "field": "*", "policy": "delete", "rows": 1},
        {"model": "jobsapp.Order", "field": "*", "policy": "retain: kept 10 years (tax law)", "rows": 0},
        {"model": "jobsapp.Review", "field": "*", "policy": "delete (cascade)", "rows": 2},
    ]  # fmt: skip


def test_a_delete_the_database_refuses_fails_terminally_with_a_code(declare, pg_driver):
    customer = _customer(orders=2, reviews=0)
    declare(
        "t.subj.blocked",
        [
            table(Customer, erase=DELETE),  # its orders PROTECT it
            table(Order, by="customer", erase=anonymize(shipping_address=REDACT)),
            table(Review, by="author", erase=DELETE),
        ],
    )
    requested = erase_subject("t.subj.blocked", customer.pk, requested_by="dpo")
    _drain(pg_driver)

    job = Job.objects.get(id=requested.job_id)
    assert (job.state, job.attempt) == ("dead", 1)
    assert job.last_error.startswith(
        "X_SUBJECT_ERASE_BLOCKED: the database refused to erase rows of "
        "jobsapp.Customer (ProtectedError)"
    )
    row = _request(requested)
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
    customer = _customer()
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

    customer = _customer()
    first = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    operator.cancel(first.job_id)
    second = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    assert not second.deduped and second.request_id != first.request_id
    old = _request(first)
    assert old.state == "failed" and "ended cancelled" in old.error


def test_the_audit_is_append_only_in_the_database(pg_driver):
    customer = _customer(orders=1, reviews=0)
    erase_subject("tests.customer", customer.pk, requested_by="dpo")
    _drain(pg_driver)
    for statement in (
        "UPDATE ultimate_jobs_erasure_record SET rows = 0",
        "DELETE FROM ultimate_jobs_erasure_record",
    ):
        with pytest.raises(DatabaseError), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement)
    assert ErasureRecord.objects.count() == 4


def test_the_plan_counts_rows_and_what_an_erase_would_change():
    customer = _customer(orders=3, reviews=2)
    Order.objects.filter(customer=customer).update(shipping_address="erased")
    plans = plan_subject("tests.customer", customer.pk)
    assert [(p.model, p.rows, p.to_treat) for p in plans] == [
        ("jobsapp.Review", 2, 2),
        ("jobsapp.Order", 3, 0),
        ("jobsapp.Customer", 1, 1),
    ]
    assert plans[1].erase == "anonymize(shipping_address=redact)"


# -- the command --------------------------------------------------------------------------


def _command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("jobs_subject", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_lists_subjects_and_dry_runs_an_erase():
    customer = _customer(orders=3, reviews=2)
    out, _ = _command("list")
    assert "tests.customer:\n  jobsapp.Review by author: delete\n" in out
    assert (
        "  jobsapp.Customer by pk: anonymize(email=redact, name=empty, phone=null)"
        in out
    )

    out, _ = _command("erase", "tests.customer", str(customer.pk))
    assert "jobsapp.Order by customer: 3 row(s), 3 to change" in out
    assert "dry run: pass --write --by WHO to erase" in out
    assert _nothing_requested()


def test_the_command_erases_and_reports_what_was_erased(pg_driver):
    from django_ultimate_jobs.management.commands.jobs_subject import Command

    customer = _customer(orders=3, reviews=2)
    out, _ = _command(
        "erase",
        "tests.customer",
        str(customer.pk),
        "--write",
        "--by",
        "dpo",
        "--no-follow",
    )
    requested = SubjectRequest.objects.get()
    assert f"erase request {requested.id} queued as job {requested.job_id}" in out
    _drain(pg_driver)

    command = Command(stdout=StringIO())
    follow = {"no_follow": False, "subject": "tests.customer"}
    row = command._follow("erase", _Requested(requested), follow)
    text = command.stdout._out.getvalue()
    assert "\r" not in text  # off a terminal: plain lines
    assert "erase tests.customer: done, 6 rows in 3 pages" in text
    assert row.state == "done"
    out, _ = _command("show", str(requested.id))
    assert "erase of tests.customer: done, 6/6 rows, requested by dpo" in out


def test_on_a_terminal_the_progress_of_a_request_is_a_bar():
    from django_ultimate_jobs.management.following import Progress

    screen, stdout = terminal()
    progress = Progress(stdout, "erase tests.customer")
    row = SubjectRequest(rows_done=0, total=1_200_000, pages_done=0, state="running")
    progress.show(row)
    # As if it began 2,000 s ago: a slow test machine's milliseconds between
    # the two reads move the rate by a millionth, not a unit.
    progress.first = (progress.first[0] - 2000.0, 0)
    row.rows_done = 600_000
    progress.show(row)
    last = screen.getvalue().split("\r")[-1]
    assert last.startswith(
        "erase tests.customer [###############               ] 600,000/1,200,000 rows"
    )
    assert ", 300 rows/s" in last and "ETA 33m20s" in last


def test_the_command_needs_an_action():
    with pytest.raises(CommandError, match="arguments are required: action"):
        _command()


class _Requested:
    def __init__(self, row):
        self.request_id, self.job_id, self.deduped = row.id, row.job_id, False


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("erase", "t.nope", "1"), "X_SUBJECT_UNKNOWN"),
        (("erase", "tests.customer", "abc"), "X_SUBJECT_KEY_INVALID"),
        (("erase", "tests.customer", "1", "--write"), "X_SUBJECT_ARGUMENT_INVALID"),
        (("export", "tests.customer", "1", "--storage", "nope"), "X_SUBJECT_STORAGE_INVALID"),
        (("show", "not-a-uuid"), "X_SUBJECT_ARGUMENT_INVALID"),
    ],
)  # fmt: skip
def test_the_command_refuses_with_the_code_and_writes_nothing(args, code):
    _customer()
    with pytest.raises(CommandError, match=code):
        _command(*args)
    assert _nothing_requested()


def test_the_command_list_fails_on_a_coverage_gap(marks):
    marks(Touch, "tbl")
    with pytest.raises(CommandError, match=r"1 personal-data gap\(s\)"):
        _command("list")


# -- the admin --------------------------------------------------------------------------


def test_the_admin_shows_progress_and_the_audit_read_only(pg_driver, admin_client):
    from django.urls import reverse

    customer = _customer(orders=2, reviews=1)
    requested = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    _drain(pg_driver)

    listing = admin_client.get(reverse("admin:ultimate_jobs_subjectrequest_changelist"))
    assert listing.status_code == 200
    assert "4 / 4 (100%)" in listing.text and "tests.customer" in listing.text
    page = admin_client.get(
        reverse(
            "admin:ultimate_jobs_subjectrequest_change", args=[requested.request_id]
        )
    )
    assert page.status_code == 200 and "shipping_address" in page.text
    audit = admin_client.get(reverse("admin:ultimate_jobs_erasurerecord_changelist"))
    assert "jobsapp.Review" in audit.text and "delete" in audit.text
    # Read-only, even for a superuser; only the list filters are taken.
    record = ErasureRecord.objects.first()
    change = reverse("admin:ultimate_jobs_erasurerecord_change", args=[record.pk])
    assert admin_client.post(change, {"rows": "0"}).status_code == 403
    assert (
        admin_client.get(
            reverse("admin:ultimate_jobs_erasurerecord_changelist"), {"rows__gt": "0"}
        ).status_code
        == 400
    )
    assert ErasureRecord.objects.get(pk=record.pk).rows == record.rows
    requests = reverse("admin:ultimate_jobs_subjectrequest_changelist")
    for query, status in (
        ({"state__exact": "done", "kind": "erase"}, 200),
        ({"state__exact": "bogus"}, 400),  # a value no row can hold
        ({"key__icontains": "ann"}, 400),  # never a lookup on the key
        ({"subject": "tests.customer"}, 200),
    ):
        assert admin_client.get(requests, query).status_code == status, query
    # A subject no row can hold is an invalid filter, as on the jobs list.
    refused = admin_client.get(requests, {"subject": "a\x00b"})
    assert refused.status_code == 302 and refused.url.endswith("?e=1")
    audit_list = reverse("admin:ultimate_jobs_erasurerecord_changelist")
    only_redacted = admin_client.get(audit_list, {"policy": "redact"})
    assert "jobsapp.Order" in only_redacted.text
    assert "jobsapp.Review" not in only_redacted.text
