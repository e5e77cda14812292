"""``manage.py jobs_subject`` and the admin pages of data subjects, on
PostgreSQL through the real worker path (``run_jobs``)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs.models import ErasureRecord, SubjectRequest
from django_ultimate_jobs.subjects import erase_subject
from tests.jobsapp.models import Touch
from tests.support.subjects import (
    drain,
    make_customer,
    nothing_requested,
)
from tests.support.terminal import terminal

pytestmark = pytest.mark.django_db

# -- the command --------------------------------------------------------------------------


def run_command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("jobs_subject", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_lists_subjects_and_dry_runs_an_erase():
    customer = make_customer(orders=3, reviews=2)
    out, _ = run_command("list")
    assert "tests.customer:\n  jobsapp.Review by author: delete\n" in out
    assert (
        "  jobsapp.Customer by pk: anonymize(email=redact, name=empty, phone=null)"
        in out
    )

    out, _ = run_command("erase", "tests.customer", str(customer.pk))
    assert "jobsapp.Order by customer: 3 rows, 3 to change" in out
    assert "dry run: pass --write --by WHO to erase" in out
    assert nothing_requested()


def test_the_command_erases_and_reports_what_was_erased(pg_driver):
    from django_ultimate_jobs.management.commands.jobs_subject import Command

    customer = make_customer(orders=3, reviews=2)
    out, _ = run_command(
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
    drain(pg_driver)

    command = Command(stdout=StringIO())
    follow = {"no_follow": False, "subject": "tests.customer"}
    row = command._follow("erase", _Requested(requested), follow)
    text = command.stdout._out.getvalue()
    assert "\r" not in text  # off a terminal: plain lines
    assert "erase tests.customer: done, 6 rows in 3 pages" in text
    assert row.state == "done"
    out, _ = run_command("show", str(requested.id))
    assert "erase of tests.customer: done, 6/6 rows, requested by dpo" in out


def test_on_a_terminal_the_progress_of_a_request_is_a_bar():
    from django_ultimate_jobs.management.progress import Progress

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
        run_command()


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
    make_customer()
    with pytest.raises(CommandError, match=code):
        run_command(*args)
    assert nothing_requested()


def test_the_command_list_fails_on_a_coverage_gap(personal_marks):
    personal_marks(Touch, "tbl")
    with pytest.raises(CommandError, match=r"1 personal-data gap:"):
        run_command("list")


# -- the admin --------------------------------------------------------------------------


def test_the_admin_shows_progress_and_the_audit_read_only(pg_driver, admin_client):
    from django.urls import reverse

    customer = make_customer(orders=2, reviews=1)
    requested = erase_subject("tests.customer", customer.pk, requested_by="dpo")
    drain(pg_driver)

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
