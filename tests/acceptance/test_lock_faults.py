"""Locks under faults: a SIGKILLed holder, a terminated keeper connection.

Judged by the lease table: a dead holder's lock is refused until its last
renewal's expiry and granted after it; a holder whose connection is cut
keeps renewing (its row's expiry moves on) and leaves its block cleanly.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.db import connection

from django_ultimate_jobs import lock
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.models import Lease
from tests.support.backends import terminate_backends, wait_for_backends
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT, database_url

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

TTL = timedelta(seconds=3)
_HOLD = """
import sys, threading
import django
django.setup()
from django_ultimate_jobs import lock
with lock("crash", ttl="3s") as held:
    print("held", held.token, held.holder, flush=True)
    threading.Event().wait()  # hold until killed
"""


def test_a_sigkilled_holders_lock_is_granted_after_its_ttl_and_not_before(
    worker_env, committed_pg_driver
):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD],
        cwd=REPO_ROOT,
        env=worker_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        assert line.startswith("held "), line + (holder.stdout.read() or "")
        _, token, dead_holder = line.split()
        # Let one renewal land, so the kill interrupts a renewing holder.
        first = Lease.objects.get(lease_key="lock:crash")
        wait_until(
            lambda: (
                Lease.objects.get(lease_key="lock:crash").expires_at > first.expires_at
            ),
            10,
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    dead = Lease.objects.get(lease_key="lock:crash")
    assert (dead.holder, dead.fence) == (dead_holder, int(token))

    # Not before its ttl: the dead holder's row is live.
    with pytest.raises(JobsError) as refused:
        with lock("crash", ttl="3s", wait=0):
            pass  # pragma: no cover - never entered
    assert refused.value.code == "X_LOCK_NOT_ACQUIRED"
    assert refused.value.meta["holder"] == dead_holder

    killed_at = time.monotonic()
    with lock("crash", ttl="3s", wait="10s") as held:
        waited = time.monotonic() - killed_at
        row = Lease.objects.get(lease_key="lock:crash")
    granted_at = row.expires_at - TTL
    assert row.holder == held.holder and held.token > int(token)
    assert granted_at >= dead.expires_at, "granted before the dead holder lapsed"
    assert waited < TTL.total_seconds() + 1.5, "granted within one ttl of the kill"


def test_a_lock_survives_its_keeper_connection_being_terminated(
    committed_pg_driver, caplog
):
    url, database = (
        database_url(connection.settings_dict),
        connection.settings_dict["NAME"],
    )
    caplog.set_level(logging.WARNING, logger="django_ultimate_jobs")
    with lock("kept", ttl="2s") as held:
        wait_for_backends(url, "uj:lock:%", database=database)
        killed = terminate_backends(url, "uj:lock:%", database=database)
        assert killed
        before = Lease.objects.get(lease_key="lock:kept").expires_at
        # Renewals (every 667 ms) reconnect and keep landing past the ttl.
        wait_until(
            lambda: (
                Lease.objects.get(lease_key="lock:kept").expires_at
                > before + timedelta(seconds=2)
            ),
            10,
            message=lambda: caplog.text,
        )
        wait_for_backends(url, "uj:lock:%", database=database)
        assert not held.lost
    assert not Lease.objects.filter(lease_key="lock:kept").exists()
    assert "jobs.lock.lost" not in caplog.text
