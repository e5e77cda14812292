"""The conformance suite on the memory driver, plus what only it does."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from django_ultimate_jobs.clock import ManualClock
from django_ultimate_jobs.drivers.base import ClaimOptions, EnqueueRequest
from django_ultimate_jobs.drivers.memory import MemoryDriver
from django_ultimate_jobs.testing.conformance import COUNTER_FIELDS, DriverConformance
from django_ultimate_jobs.wake import wake_hub


class TestMemoryDriver(DriverConformance):
    """Every conformance check, on the memory driver."""

    @pytest.fixture
    def clock(self):
        return ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))

    @pytest.fixture
    def driver(self, clock):
        driver = MemoryDriver(clock=clock)
        yield driver
        driver.close()

    @pytest.fixture
    def put_step(self, driver):
        return driver.put_step

    @pytest.fixture
    def step_names(self, driver):
        return driver.step_names

    @pytest.fixture
    def counters(self, driver):
        def read(job):
            buckets = driver.counters(job)
            assert all(set(c) == set(COUNTER_FIELDS) for c in buckets.values())
            return buckets

        return read


@pytest.fixture
def driver():
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))
    driver = MemoryDriver(clock=clock)
    yield driver
    driver.close()


@pytest.fixture
def woken():
    queues: list[str] = []
    unsubscribe = wake_hub.subscribe(queues.append)
    yield queues
    unsubscribe()


def test_due_rows_wake_their_queue(driver, woken):
    """Enqueueing a due row wakes its queue; a delayed row does not."""
    driver.enqueue(EnqueueRequest(name="wake.due", input={}, queue="q-due"))
    driver.enqueue(
        EnqueueRequest(name="wake.later", input={}, queue="q-later", delay_ms=60_000)
    )
    driver.enqueue_many(
        [EnqueueRequest(name="wake.many", input={}, queue="q-many")] * 2
    )
    assert woken == ["q-due", "q-many"]


def test_resume_and_promote_wake(driver, woken):
    """Resuming a paused queue and promoting a job wake the queue."""
    driver.pause_queue("q-paused")
    driver.resume_queue("q-paused")
    driver.resume_queue("q-never-paused")
    delayed = driver.enqueue(
        EnqueueRequest(name="wake.promote", input={}, queue="q-promote", delay_ms=1)
    )
    driver.promote(delayed.id)
    assert woken == ["q-paused", "q-promote"]


def test_stored_input_is_a_copy(driver):
    """Mutating the input given or read back never reaches the stored row."""
    given = {"items": [1, 2]}
    enqueued = driver.enqueue(EnqueueRequest(name="copy", input=given))
    given["items"].append(3)
    driver.get(enqueued.id).input["items"].append(4)
    assert driver.get(enqueued.id).input == {"items": [1, 2]}


def test_close_forgets_everything(driver):
    """close() drops rows, pauses and counters."""
    enqueued = driver.enqueue(EnqueueRequest(name="forget", input={}))
    driver.pause_queue("default")
    driver.close()
    assert driver.get(enqueued.id) is None
    assert driver.paused_queues() == [] and driver.stats() == []


def test_threads_never_share_a_claim(driver):
    """Concurrent claims hand each row to exactly one thread."""
    driver.enqueue_many(
        [EnqueueRequest(name="race", input={"n": n}, queue="race") for n in range(400)]
    )
    claimed: list[list] = [[] for _ in range(8)]

    def work(slot: int) -> None:
        options = ClaimOptions(
            queues=["race"], limit=7, worker_id=f"w{slot}", visibility_ms=60_000
        )
        while batch := driver.claim(options).claimed:
            claimed[slot].extend(job.id for job in batch)

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [job_id for batch in claimed for job_id in batch]
    assert len(ids) == len(set(ids)) == 400


def test_input_jsonb_would_refuse_is_refused(driver):
    """A NUL character fails the enqueue, as PostgreSQL's jsonb refuses it."""
    with pytest.raises(ValueError, match="NUL"):
        driver.enqueue(EnqueueRequest(name="nul", input={"text": "a\x00b"}))
    assert driver.stats() == []
