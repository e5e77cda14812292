"""The snapshot rule of waits, with real transactions on two connections.

An event committed after a wait began belongs to it, whatever its stamp;
one committed before does not; a rolled-back one matches nothing.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from django_ultimate_jobs import job, publish_event
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.drivers.postgres import PostgresDriver
from django_ultimate_jobs.drivers.postgres.listener import WakeListener
from django_ultimate_jobs.registry import unregister
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.worker.config import WorkerConfig
from django_ultimate_jobs.worker.runner import Worker
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUEUE = "event-races"


@pytest.fixture
def driver():
    installed = PostgresDriver()
    previous = set_driver(installed)
    yield installed
    set_driver(previous)


@job(name="tests.events.waiter", queue=QUEUE)
def waiter(ctx, *, key: str):
    return ctx.step.wait_for_event("w", "order.paid", key=key, timeout="1h")


def teardown_module():
    unregister("tests.events.waiter")


class OpenPublisher:
    """Publishes inside a transaction on another connection, commits on demand."""

    def __init__(self, key: str, payload: dict) -> None:
        self.published = threading.Event()
        self.finish = threading.Event()
        self.commit = True
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(key, payload))

    def _run(self, key: str, payload: dict) -> None:
        try:
            try:
                with transaction.atomic():
                    publish_event("order.paid", payload, key=key)
                    self.published.set()
                    self.finish.wait(30)
                    if not self.commit:
                        raise _Rollback
            except _Rollback:
                pass
        finally:
            connection.close()
            self.done.set()

    def __enter__(self) -> OpenPublisher:
        self.thread.start()
        assert self.published.wait(10)
        return self

    def end(self, *, commit: bool) -> None:
        self.commit = commit
        self.finish.set()
        self.thread.join(10)

    def __exit__(self, *exc: object) -> None:
        if not self.done.is_set():
            self.end(commit=False)


class _Rollback(Exception):
    pass


def drain():
    return run_jobs(queues=[QUEUE])


def test_a_publish_open_before_the_wait_and_committed_after_is_matched(driver):
    """Its stamp is before the wait, but its commit is after: it belongs to it."""
    enqueued = waiter.enqueue(key="a")
    with OpenPublisher("a", {"paid": 1}) as publisher:
        (parked,) = drain()
        assert parked.outcome == "suspended"
        publisher.end(commit=True)
    (resumed,) = drain()  # the commit-time wake made it due at once
    assert resumed.result == {"paid": 1}
    assert driver.get(enqueued.id).state == "done"


def test_a_rolled_back_publish_matches_nothing(driver):
    """The event never existed: the wait stays parked."""
    enqueued = waiter.enqueue(key="b")
    with OpenPublisher("b", {"paid": 2}) as publisher:
        (parked,) = drain()
        assert parked.outcome == "suspended"
        publisher.end(commit=False)
    assert drain() == []
    record = driver.get(enqueued.id)
    assert record.state == "suspended"
    (step,) = driver.steps.list(record.run_id).values()
    assert driver.events.find(step) is None


def test_an_event_committed_before_the_wait_began_is_not_matched(driver):
    """Published and committed before the wait: it is not this wait's event."""
    publish_event("order.paid", {"paid": 3}, key="c")
    enqueued = waiter.enqueue(key="c")
    (parked,) = drain()
    assert parked.outcome == "suspended"
    assert driver.get(enqueued.id).state == "suspended"


def test_two_waiters_with_different_keys_each_get_their_own_event(driver):
    """Keys route events: each waiter resumes with the payload for its key."""
    first = waiter.enqueue(key="k1")
    second = waiter.enqueue(key="k2")
    assert [e.outcome for e in drain()] == ["suspended", "suspended"]
    publish_event("order.paid", {"for": "k2"}, key="k2")
    publish_event("order.paid", {"for": "k1"}, key="k1")
    results = {e.claimed.id: e.result for e in drain()}
    assert results == {first.id: {"for": "k1"}, second.id: {"for": "k2"}}


def test_a_waiter_parked_during_an_open_publish_resumes_soon_after_the_commit(driver):
    """The commit-time wake resumes it within 1 s, not at the 15-minute backstop.

    The worker polls at its defaults (idle ceiling 2 s, 5 s once the wake is
    proven), so a resume inside 1 s comes from the commit wake's NOTIFY.
    """
    worker = Worker(
        WorkerConfig.from_settings(queues=(QUEUE,), concurrency=2), driver=driver
    )
    listener = WakeListener(
        on_live=lambda live: setattr(worker.backoff, "wake_live", live)
    )
    listener.start()
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        enqueued = waiter.enqueue(key="late")
        with OpenPublisher("late", {"paid": 5}) as publisher:
            wait_until(
                lambda: driver.get(enqueued.id).state == "suspended",
                timeout=10,
                message="the waiter never parked",
            )
            committed = time.monotonic()
            publisher.end(commit=True)
        wait_until(
            lambda: driver.get(enqueued.id).state == "done",
            timeout=5,
            message="the waiter did not resume after the commit",
        )
        elapsed = time.monotonic() - committed
        assert elapsed < 1.0, f"resumed {elapsed:.3f} s after the commit"
    finally:
        worker.request_stop(deadline_s=2)
        runner.join(10)
        listener.stop()
        connection.close()
