"""Cron tasks across a fleet: exactly once per occurrence, a leader killed mid-way.

Two schedulers run in two threads, each on its own database connection (as
two processes would), over one simulated hour of per-minute occurrences:
a shared :class:`ManualClock` moves 6 s per round and both schedulers
start each round together (a barrier), so their statements race. Half-way
the leader dies without releasing its lease (a SIGKILL); the standby must
take over once the lease lapses and catch up (``catch_up="run-all"``).

A second run makes both schedulers believe they lead (one holder id) for
the whole hour: only the fire statement's watermark fence keeps each
occurrence to one set of jobs.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from django_ultimate_jobs import task
from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.crontask import unregister_task
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.models import Job
from django_ultimate_jobs.worker.scheduler import Scheduler
from tests.jobsapp.jobs import noop

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTES = 60
KILL_AT = 30
ROUND_TIMEOUT_S = 30


@pytest.fixture
def every_minute():
    handle = task(
        name="tests.cron.fleet",
        cron="* * * * *",
        tz="Europe/Paris",
        catch_up="run-all",
        job=noop,
        input=lambda occurrence: {"at": occurrence.isoformat()},
    )
    yield handle
    unregister_task(handle.name)


def run_hour(every_minute, holders: tuple[str, str], kill_leader: bool):
    """Run the simulated hour; answers the schedulers and the one killed."""
    clock = ManualClock(START)
    nodes = [
        Scheduler(
            driver=PostgresDriver(clock=clock),
            clock=clock,
            tasks=lambda: [every_minute],
            holder=holder,
        )
        for holder in holders
    ]
    live = list(nodes)
    killed = None
    with ThreadPoolExecutor(len(nodes), thread_name_prefix="node") as pool:
        for minute in range(MINUTES + 1):
            # Ten rounds a minute, 6 s apart: the lease (30 s TTL, asked
            # every 10 s) lapses and changes hands inside the simulated hour.
            for _ in range(10):
                together = threading.Barrier(len(live))
                rounds = [pool.submit(_round, node, together) for node in live]
                for done in rounds:
                    done.result(ROUND_TIMEOUT_S)
                clock.advance(seconds=6)
            if kill_leader and minute == KILL_AT:
                # SIGKILL: it stops without releasing its lease.
                killed = next(n for n in live if n.lease.leading)
                live.remove(killed)
        # Each pool thread closes its own connection (the barrier puts one
        # close on each thread).
        together = threading.Barrier(len(nodes))
        closing = [pool.submit(_close, together) for _ in nodes]
        for done in closing:
            done.result(ROUND_TIMEOUT_S)
    return nodes, killed


def _close(together: threading.Barrier) -> None:
    together.wait(ROUND_TIMEOUT_S)
    connections.close_all()


def _round(scheduler: Scheduler, together: threading.Barrier) -> None:
    together.wait(ROUND_TIMEOUT_S)  # both nodes' statements race
    scheduler.tick()


def occurrences_enqueued():
    return Counter(
        input_["at"]
        for input_ in Job.objects.filter(name="tests.noop").values_list(
            "input", flat=True
        )
    )


def expected_occurrences():
    return {
        (START + timedelta(minutes=m)).astimezone(every_zone()).isoformat()
        for m in range(1, MINUTES + 1)
    }


def every_zone():
    from zoneinfo import ZoneInfo

    return ZoneInfo("Europe/Paris")


def test_each_occurrence_once_when_the_leader_is_killed_mid_hour(every_minute):
    """60 occurrences, 60 jobs; the standby fired the second half after the kill."""
    nodes, killed = run_hour(every_minute, ("node-a", "node-b"), kill_leader=True)
    enqueued = occurrences_enqueued()
    assert set(enqueued) == expected_occurrences()
    assert set(enqueued.values()) == {1}
    survivor = next(n for n in nodes if n is not killed)
    assert killed.fired and survivor.fired
    assert max(f.occurrence for f in killed.fired) <= START + timedelta(
        minutes=KILL_AT + 1
    )


def test_each_occurrence_once_when_both_nodes_believe_they_lead(every_minute):
    """One holder id for both: both lead all hour; the fence keeps one fire each."""
    nodes, _ = run_hour(every_minute, ("twin", "twin"), kill_leader=False)
    enqueued = occurrences_enqueued()
    assert set(enqueued) == expected_occurrences()
    assert set(enqueued.values()) == {1}
    fired = Counter(f.occurrence for n in nodes for f in n.fired)
    assert set(fired.values()) == {1}
