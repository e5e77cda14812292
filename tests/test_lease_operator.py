"""Who holds what: ``operator.leases``, the admin's leases page, ``jobs leases``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_ultimate_jobs import operator

pytestmark = pytest.mark.postgres

PAGE = "admin:ultimate_jobs_job_leases"


@pytest.fixture
def held(pg_driver, clock):
    """A live lock, two job slots (one of them lapsed) and a leader lease."""
    leases = pg_driver.leases
    lock = leases.acquire("lock:invoice:42", 1, 30_000, "host:1:abc")
    lapsed = leases.acquire("job:billing.sync", 2, 1_000, "w1:job-a")
    slot = leases.acquire("job:billing.sync", 2, 30_000, "w2:job-b")
    pg_driver.leader_acquire("ultimate_jobs:scheduler", "scheduler-x", ttl_ms=30_000)
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
    with pytest.raises(CommandError, match="X_JOB_PAGE_INVALID"):
        call_command("jobs", "leases", "--limit", "0", stdout=StringIO())


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
