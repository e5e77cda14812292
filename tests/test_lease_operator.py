"""Who holds what: ``operator.leases``, the admin's leases page, ``jobs leases``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_ultimate_jobs import fenced_update, operator
from django_ultimate_jobs.errors import JobsError
from tests.jobsapp.models import Invoice

pytestmark = pytest.mark.postgres

PAGE = "admin:ultimate_jobs_job_leases"


@pytest.fixture
def held(pg_driver, clock):
    """A live lock, two job slots (one of them lapsed) and a leader lease."""
    leases = pg_driver.leases
    lock = leases.acquire("lock:invoice:42", 1, 30_000, "host:1:abc")
    lapsed = leases.acquire("job:billing.sync", 2, 1_000, "w1:job-a")
    slot = leases.acquire("job:billing.sync", 2, 30_000, "w2:job-b")
    pg_driver.cron.leader_acquire(
        "ultimate_jobs:scheduler", "scheduler-x", ttl_ms=30_000
    )
    clock.advance(seconds=1)
    return lock, lapsed, slot


def test_the_verb_lists_every_row_with_its_kind_token_and_lapse(held):
    lock, lapsed, slot = held
    rows = operator.leases()
    assert [(r["key"], r["slot"], r["kind"], r["expired"]) for r in rows] == [
        ("job:billing.sync", 0, "job", True),
        ("job:billing.sync", 1, "job", False),
        ("lock:invoice:42", 0, "lock", False),
        ("ultimate_jobs:scheduler", 0, "leader", False),
    ]
    assert [r["token"] for r in rows[:3]] == [lapsed.fence, slot.fence, lock.fence]
    assert rows[2]["holder"] == "host:1:abc"
    assert rows[2]["expires_at"] == lock.expires_at.isoformat()
    assert [r["key"] for r in operator.leases(prefix="lock:")] == ["lock:invoice:42"]
    assert len(operator.leases(limit=1)) == 1


@pytest.mark.parametrize(
    "arguments", [{"limit": 0}, {"limit": 201}, {"prefix": "a\x00"}]
)
def test_the_verb_refuses_a_bad_page_before_any_statement(pg_driver, arguments):
    with pytest.raises(Exception) as refused:
        operator.leases(**arguments)
    assert getattr(refused.value, "code", None) == "X_JOB_PAGE_INVALID"


def test_the_command_prints_who_holds_what(held):
    out = StringIO()
    call_command("jobs", "leases", stdout=out)
    text = out.getvalue()
    assert "lock:invoice:42 #0 (lock) holder=host:1:abc" in text
    assert "job:billing.sync #0 (job) holder=w1:job-a" in text and "EXPIRED" in text
    out = StringIO()
    call_command("jobs", "leases", "--prefix", "lock:", "--json", stdout=out)
    assert [r["key"] for r in json.loads(out.getvalue())] == ["lock:invoice:42"]
    with pytest.raises(CommandError, match="X_JOB_PAGE_INVALID") as refused:
        call_command("jobs", "leases", "--limit", "0", stdout=StringIO())
    # The fix names what leases takes: a limit, no cursor.
    assert "pass a limit of 1 to 200" in str(refused.value)
    assert "cursor" not in str(refused.value)


def test_the_admin_page_shows_holders_tokens_and_expiry(admin_client, held):
    lock, _, _ = held
    page = admin_client.get(reverse(PAGE))
    assert page.status_code == 200
    assert "lock:invoice:42" in page.text and "host:1:abc" in page.text
    assert str(lock.fence) in page.text and "uj-expired" in page.text
    narrowed = admin_client.get(reverse(PAGE), {"prefix": "job:"})
    assert "lock:invoice:42" not in narrowed.text and "w2:job-b" in narrowed.text
    refused = admin_client.get(reverse(PAGE), {"prefix": "a\x00"})
    assert refused.status_code == 200 and "prefix" in refused.text


def test_the_admin_page_needs_view_job(client, db, held):
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(reverse(PAGE)).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(User.objects.get(pk=user.pk))
    assert client.get(reverse(PAGE)).status_code == 200


def test_a_refused_prefix_says_its_own_fix_and_not_no_leases(admin_client, held):
    with pytest.raises(JobsError) as refused:
        operator.leases(prefix="a\x00")
    assert "prefix" in refused.value.fix and "cursor" not in refused.value.fix
    page = admin_client.get(reverse(PAGE), {"prefix": "a\x00"})
    assert "NUL" in page.text and "No leases" not in page.text


def test_release_deletes_a_stuck_lock_and_its_holder_stays_fenced(held, pg_driver):
    """jobs leases --release: the key is free, the old token is still refused."""
    stuck, _, _ = held
    invoice = Invoice.objects.create()
    rows = Invoice.objects.filter(pk=invoice.pk)
    assert fenced_update(rows, stuck.fence, status="stuck") == 1
    out = StringIO()
    call_command("jobs", "leases", "--release", "lock:invoice:42", stdout=out)
    assert f"released lock:invoice:42 #0 holder=host:1:abc token={stuck.fence}" in (
        out.getvalue()
    )
    assert [r["key"] for r in operator.leases(prefix="lock:")] == []
    assert not pg_driver.leases.renew(stuck, 30_000)  # the old holder lost it
    taken = pg_driver.leases.acquire("lock:invoice:42", 1, 30_000, "next")
    assert taken is not None and taken.fence > stuck.fence
    assert fenced_update(rows, taken.fence, status="next") == 1
    with pytest.raises(JobsError) as stale:
        fenced_update(rows, stuck.fence, status="stuck-again")
    assert stale.value.code == "X_LOCK_TOKEN_STALE"


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("job:billing.sync", "X_LOCK_INVALID"),
        ("ultimate_jobs:scheduler", "X_LOCK_INVALID"),
        ("lock:", "X_LOCK_INVALID"),
        ("lock:a\x00", "X_LOCK_INVALID"),
        ("lock:nobody", "X_LOCK_NOT_FOUND"),
    ],
)
def test_release_refuses_what_is_not_a_stored_lock(held, key, code):
    before = operator.leases()
    with pytest.raises(JobsError) as refused:
        operator.release_lock(key)
    assert refused.value.code == code
    assert operator.leases() == before
    with pytest.raises(CommandError, match=code):
        call_command("jobs", "leases", "--release", key, stdout=StringIO())


def test_the_command_says_when_its_output_was_cut_at_the_limit(held):
    out, err = StringIO(), StringIO()
    call_command("jobs", "leases", "--limit", "2", stdout=out)
    assert "the first 2 rows by key: more may be stored" in out.getvalue()
    call_command("jobs", "leases", "--limit", "2", "--json", stdout=out, stderr=err)
    assert "the first 2 rows" in err.getvalue()
    whole = StringIO()
    call_command("jobs", "leases", stdout=whole)
    assert "more may be stored" not in whole.getvalue()


def test_a_key_with_control_characters_cannot_forge_a_line_of_the_listing(
    pg_driver,
):
    """A lease key built from user input, with a newline and a terminal
    escape in it: ``jobs leases`` prints it escaped, on its own line."""
    forged = "evil\nlock:fake #0 (lock) holder=admin token=1\x1b[31mRED"
    pg_driver.leases.acquire(f"lock:{forged}", 1, 30_000, "host:1:abc")
    out = StringIO()
    call_command("jobs", "leases", stdout=out)
    (line,) = out.getvalue().splitlines()
    assert "\x1b" not in line
    assert line.startswith(
        "lock:evil\\nlock:fake #0 (lock) holder=admin token=1\\x1b[31mRED #0"
    )
