"""Enqueue inside real transactions: commit, rollback, visibility, the wake.

These tests need real commits and rollbacks, so they use pytest-django's
``transactional_db`` (tables are flushed after each test) rather than the
test-wide transaction of ``db``. Another connection is another thread:
Django gives each thread its own connection, closed at the thread's end.

Wake notifications are read on a separate autocommit psycopg connection that
LISTENs on ``ultimate_jobs_wake``. Each test enqueues to a queue name of its
own and counts only notifications carrying that name, so another process
using the same database cannot disturb the counts.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.base import ClaimOptions
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.models import Job
from tests.jobsapp.jobs import charge, noop

pytestmark = pytest.mark.postgres

WAKE_CHANNEL = "ultimate_jobs_wake"
ARRIVAL_TIMEOUT_S = 5.0
# How long a test watches for a notification that must NOT come. A bounded
# wait for absence: NOTIFY is delivered at commit, within milliseconds on a
# local server, so half a second of silence is a clear "none was sent".
ABSENCE_WINDOW_S = 0.5


class BusinessFailure(Exception):
    """Raised inside an atomic block to roll it back."""


@pytest.fixture
def driver(committed_pg_driver):
    """The Postgres driver on the database clock, with committed rows."""
    return committed_pg_driver


@pytest.fixture
def frozen_driver(transactional_db):
    """The Postgres driver on a frozen clock: every row shares one 250 ms slot."""
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 0, 100_000, tzinfo=UTC))
    installed = PostgresDriver(clock=clock)
    previous = set_driver(installed)
    yield installed
    set_driver(previous)


@pytest.fixture
def queue() -> str:
    """A queue name no other test (or process) uses."""
    return f"wake-{uuid4().hex[:12]}"


class Listener:
    """A LISTEN session on the wake channel, on its own connection.

    Every notification read is kept in ``pending`` until a check consumes
    it: one network packet can carry several, and a generator abandoned
    mid-packet would drop the rest.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.pending: list[str] = []

    def _read(self, timeout: float, stop_after: int | None = None) -> None:
        for notify in self.conn.notifies(timeout=timeout, stop_after=stop_after):
            if notify.channel == WAKE_CHANNEL:
                self.pending.append(notify.payload)

    def next_for(self, queue: str, *, timeout: float = ARRIVAL_TIMEOUT_S) -> bool:
        """Wait up to ``timeout`` s for one notification naming ``queue``."""
        deadline = time.monotonic() + timeout
        while queue not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._read(left, stop_after=1)
        self.pending.remove(queue)
        return True

    def count_for(self, queue: str, *, timeout: float = ABSENCE_WINDOW_S) -> int:
        """Count notifications naming ``queue`` that arrive within ``timeout`` s."""
        self._read(timeout)
        count = self.pending.count(queue)
        self.pending = [payload for payload in self.pending if payload != queue]
        return count


@pytest.fixture
def listener(transactional_db):
    """LISTEN on ``ultimate_jobs_wake`` with a separate autocommit connection."""
    connection.ensure_connection()
    params = {
        key: value
        for key, value in connection.get_connection_params().items()
        if isinstance(value, str | int) and value != "" and key != "prepare_threshold"
    }
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute(f"LISTEN {WAKE_CHANNEL}")
    try:
        yield Listener(conn)
    finally:
        conn.close()


def in_another_thread(work):
    """Run ``work()`` on another thread (so another connection); return its result."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # re-raised in the calling thread
            outcome["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the other connection's work did not finish"
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]


def claim_ids(driver: PostgresDriver, queue: str) -> list[UUID]:
    """Claim every due job of ``queue`` on the current thread's connection."""
    result = driver.claim(
        ClaimOptions(queues=[queue], limit=10, worker_id="w-test", visibility_ms=30_000)
    )
    return [claimed.id for claimed in result.claimed]


# -- commit and rollback --------------------------------------------------------


def test_a_rolled_back_transaction_leaves_no_job_row(driver):
    """The enqueue rolls back with the business write it was made beside."""
    with pytest.raises(BusinessFailure):
        with transaction.atomic():
            get_user_model().objects.create_user("ada")
            noop.enqueue()
            assert Job.objects.count() == 1
            raise BusinessFailure

    assert Job.objects.count() == 0
    assert get_user_model().objects.count() == 0


def test_a_rolled_back_savepoint_drops_only_its_own_enqueue(driver):
    """A nested block that rolls back takes its enqueue; the outer one commits."""
    with transaction.atomic():
        kept = noop.enqueue()
        with pytest.raises(BusinessFailure):
            with transaction.atomic():
                noop.enqueue()
                raise BusinessFailure

    assert list(Job.objects.values_list("id", flat=True)) == [kept.id]


def test_a_committed_enqueue_is_claimable(driver):
    """After commit the Postgres driver's claim returns the job."""
    with transaction.atomic():
        get_user_model().objects.create_user("grace")
        answer = noop.enqueue()

    assert claim_ids(driver, "default") == [answer.id]


def test_an_uncommitted_enqueue_is_invisible_to_other_connections(driver):
    """I-ATOMIC: another connection's claim finds nothing until the commit."""
    with transaction.atomic():
        answer = charge.enqueue(invoice_id=1, org_id="acme")
        assert in_another_thread(lambda: claim_ids(driver, "billing")) == []
        assert in_another_thread(lambda: Job.objects.count()) == 0

    assert in_another_thread(lambda: claim_ids(driver, "billing")) == [answer.id]


def test_a_dedupe_inside_a_transaction_sees_its_own_uncommitted_holder(driver):
    """Two enqueues of one key in one transaction: one row, the second deduped."""
    with transaction.atomic():
        first = charge.enqueue(invoice_id=1, org_id="acme")
        second = charge.enqueue(invoice_id=1, org_id="acme")

    assert (second.id, second.deduped) == (first.id, True)
    assert Job.objects.count() == 1


# -- the wake notification ---------------------------------------------------------


def test_a_due_enqueue_in_autocommit_notifies_its_queue(driver, listener, queue):
    """The payload is the queue name, delivered as the statement commits."""
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)


def _timed(listener: Listener, queue: str) -> list[int]:
    """The Unix ms of the timed wakes naming ``queue`` read within the window."""
    listener.count_for(queue)
    prefix = f"{queue}\t"
    found = [int(p[len(prefix) :]) for p in listener.pending if p.startswith(prefix)]
    listener.pending = [p for p in listener.pending if not p.startswith(prefix)]
    return found


def _bin_end_ms(run_at: datetime) -> int:
    ms = (run_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    return ms - ms % 20 + 20


def test_a_delayed_enqueue_sends_a_timed_wake_not_a_plain_one(
    frozen_driver, listener, queue
):
    """Due in 10 s: no worker is woken now; the payload says when it falls due
    (the end of its 20 ms bin), so an idle worker sleeps until then."""
    row = noop.using(queue=queue, delay="10s").enqueue()
    run_at = Job.objects.get(id=row.id).run_at
    assert _timed(listener, queue) == [_bin_end_ms(run_at)]
    assert listener.count_for(queue) == 0


def test_a_second_delayed_row_of_the_same_bin_stays_silent(
    frozen_driver, listener, queue
):
    """Its bin's first row already told the workers when both fall due."""
    noop.using(queue=queue, delay="10s").enqueue()
    assert len(_timed(listener, queue)) == 1
    noop.using(queue=queue, delay="10s").enqueue()
    assert _timed(listener, queue) == []
    noop.using(queue=queue, delay="11s").enqueue()  # another bin
    assert len(_timed(listener, queue)) == 1


def test_a_row_due_in_more_than_an_hour_sends_nothing(driver, listener, queue):
    """Far rows are found by the idle poll: no wake of any kind."""
    noop.using(queue=queue, delay="2h").enqueue()
    assert _timed(listener, queue) == []


def test_a_deduped_enqueue_sends_no_notification(frozen_driver, listener, queue):
    """An enqueue that inserts nothing wakes nobody (bounded wait for absence)."""
    noop.using(queue=queue, idempotency_key="once").enqueue()
    assert listener.next_for(queue)
    frozen_driver.clock.advance(seconds=1)  # another slot: silence is the dedupe's
    assert noop.using(queue=queue, idempotency_key="once").enqueue().deduped
    assert listener.count_for(queue) == 0


def test_inside_a_transaction_the_notification_waits_for_commit(
    driver, listener, queue
):
    """Nothing arrives while the block is open (bounded wait); it arrives at commit."""
    with transaction.atomic():
        noop.using(queue=queue).enqueue()
        assert listener.count_for(queue) == 0
    assert listener.next_for(queue)


def test_a_rolled_back_transaction_sends_no_notification(driver, listener, queue):
    """A rolled-back enqueue wakes nobody (bounded wait for absence)."""
    with pytest.raises(BusinessFailure):
        with transaction.atomic():
            noop.using(queue=queue).enqueue()
            raise BusinessFailure
    assert listener.count_for(queue) == 0


def test_two_due_enqueues_in_one_transaction_notify_once(driver, listener, queue):
    """Same queue, same slot (one transaction, one now()): exactly one notification.

    PostgreSQL also folds identical notifications of one transaction; the
    autocommit test below shows the slot rule without that help.
    """
    with transaction.atomic():
        noop.using(queue=queue).enqueue()
        noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)
    assert listener.count_for(queue) == 0


def test_a_second_due_enqueue_in_the_same_slot_stays_silent(
    frozen_driver, listener, queue
):
    """Two autocommit enqueues at one instant: the second finds the first ready."""
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)
    noop.using(queue=queue).enqueue()
    assert listener.count_for(queue) == 0


def test_the_next_slot_notifies_again(frozen_driver, listener, queue):
    """250 ms later is another slot: the next due enqueue notifies."""
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)
    frozen_driver.clock.advance(milliseconds=250)
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)


def test_another_queue_in_the_same_slot_is_not_silenced(frozen_driver, listener, queue):
    """The slot rule is per queue."""
    other = f"{queue}-other"
    noop.using(queue=queue).enqueue()
    noop.using(queue=other).enqueue()
    assert listener.next_for(queue)
    assert listener.next_for(other)


def test_a_delayed_row_does_not_silence_a_due_row_of_its_slot(
    frozen_driver, listener, queue
):
    """A delayed row sent nothing, so a due row after it in the slot must notify."""
    noop.using(queue=queue, delay="10s").enqueue()
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue), (
        "BUG: a due enqueue after a delayed one in the same 250 ms slot sent no "
        "wake; no worker was woken for it"
    )


def test_a_claimed_row_does_not_silence_a_due_row_of_its_slot(
    frozen_driver, listener, queue
):
    """Once the slot's first row is claimed, the next due row notifies."""
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)
    assert len(claim_ids(frozen_driver, queue)) == 1
    noop.using(queue=queue).enqueue()
    assert listener.next_for(queue)


def test_enqueue_many_notifies_once_per_queue(frozen_driver, listener, queue):
    """A batch of due rows sends one notification per queue it filled."""
    other = f"{queue}-other"
    noop.using(queue=queue).enqueue_many([{"n": n} for n in range(3)])
    noop.using(queue=other).enqueue_many([{"n": 1}])
    assert listener.next_for(queue)
    assert listener.next_for(other)
    assert listener.count_for(queue) == 0


def test_a_delayed_batch_sends_one_timed_wake_per_bin(frozen_driver, listener, queue):
    """A batch due in 10 s wakes nobody now: one timed wake for its bin."""
    noop.using(queue=queue, delay=timedelta(seconds=10)).enqueue_many(
        [{"n": n} for n in range(3)]
    )
    run_at = Job.objects.filter(queue=queue).first().run_at
    assert _timed(listener, queue) == [_bin_end_ms(run_at)]
    assert listener.count_for(queue) == 0
