"""Racing enqueues of one idempotency key, each on its own connection.

Threads start together behind a barrier; Django gives each thread its own
database connection (opened before the barrier, so the race is on the
insert, not on connecting) and each thread closes it at its end. The
partial unique index, not a read, decides the winner.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

from django_ultimate_jobs.errors import JobDuplicate
from django_ultimate_jobs.models import Job
from tests.jobsapp.jobs import charge

pytestmark = pytest.mark.postgres

WANTED_THREADS = 100


def racer_count() -> int:
    """100 racers, or fewer only when other sessions hold connections.

    PostgreSQL's default ``max_connections`` is 100 (superusers may use
    every slot). This test's own connection is closed before the race, so
    on a server nothing else uses, all 100 racers get a connection; the
    client sessions other programs hold right now are left free, so a
    suite running beside this one cannot starve it (it then races fewer).
    """
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        limit = int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        others = int(cursor.fetchone()[0])
    connection.close()  # reopened by the fixtures after the race
    # Sessions come and go on a shared server: when others are connected,
    # keep a few slots free for them rather than race them to the limit.
    count = min(WANTED_THREADS, limit - others - (5 if others else 0))
    assert count >= 10, f"only {count} connections free on this server; no real race"
    if count < WANTED_THREADS:
        print(f"racing {count} threads: {others} other sessions hold connections")
    return count


@pytest.fixture
def driver(committed_pg_driver):
    """The Postgres driver on the database clock, with committed rows."""
    return committed_pg_driver


def race(count: int, enqueue) -> list[object]:
    """Run ``enqueue()`` on ``count`` threads at once; answers or errors, in order."""
    barrier = threading.Barrier(count, timeout=60)
    outcomes: list[object] = [None] * count

    def racer(index: int) -> None:
        try:
            connection.ensure_connection()
            barrier.wait()
            outcomes[index] = enqueue()
        except BaseException as error:  # collected, asserted by the test
            outcomes[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(thread.is_alive() for thread in threads), "a racer hung"
    return outcomes


def live_rows_of_the_key() -> list[Job]:
    return list(
        Job.objects.filter(
            name="tests.charge",
            tenant_id="acme",
            idempotency_key="charge:1",
            state__in=["ready", "delayed", "running", "suspended"],
        )
    )


def test_racing_enqueues_of_one_key_make_one_job(driver):
    """One row; one answer ``deduped=False``, the rest ``deduped=True``, one id."""
    count = racer_count()
    outcomes = race(count, lambda: charge.enqueue(invoice_id=1, org_id="acme"))

    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert errors == []
    assert Counter(o.deduped for o in outcomes) == {False: 1, True: count - 1}
    assert len({(o.id, o.run_id) for o in outcomes}) == 1
    (row,) = live_rows_of_the_key()
    assert row.id == outcomes[0].id
    assert Job.objects.count() == 1


def test_racing_enqueues_with_on_conflict_error_let_exactly_one_through(driver):
    """One success; every other racer gets ``X_JOB_DUPLICATE`` naming the winner."""
    count = racer_count()
    strict = charge.using(on_conflict="error")
    outcomes = race(count, lambda: strict.enqueue(invoice_id=1, org_id="acme"))

    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(winners) == 1 and winners[0].deduped is False
    assert all(isinstance(o, JobDuplicate) for o in losers), {
        type(o).__name__ for o in losers
    }
    assert len(losers) == count - 1
    assert {o.code for o in losers} == {"X_JOB_DUPLICATE"}
    assert {o.meta["holder"] for o in losers} == {str(winners[0].id)}
    (row,) = live_rows_of_the_key()
    assert row.id == winners[0].id
    assert Job.objects.count() == 1
