"""The claim loop's wake (worker/wakeflag.py) keeps threading.Event's promises.

The claim loop relies on them: a set before the wait is not lost, a set from
another thread ends the wait at once, a cleared wake does not end the next
wait early, and a wait with nothing set lasts its timeout.
"""

from __future__ import annotations

import threading
import time

from django_ultimate_jobs.wake import split_hint
from django_ultimate_jobs.worker.backoff import IdleBackoff
from django_ultimate_jobs.worker.wakeflag import ClaimWake, WakeFlag
from tests.support.waiting import wait_until


def test_a_set_before_the_wait_ends_it_at_once():
    wake = WakeFlag()
    wake.set()
    wake.set()  # twice: still one pending wake
    assert wake.is_set()
    started = time.monotonic()
    assert wake.wait(5.0) is True
    assert time.monotonic() - started < 1.0


def test_a_cleared_wake_does_not_end_the_next_wait():
    wake = WakeFlag()
    wake.set()
    wake.set()
    wake.clear()
    assert not wake.is_set()
    started = time.monotonic()
    assert wake.wait(0.05) is False
    assert time.monotonic() - started >= 0.04


def test_a_set_from_another_thread_ends_a_wait_in_progress():
    wake = WakeFlag()
    waiting = threading.Event()
    answers: list[tuple[bool, float]] = []

    def waiter() -> None:
        waiting.set()
        started = time.monotonic()
        answers.append((wake.wait(30.0), time.monotonic() - started))

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait(5.0)
    wake.set()
    thread.join(10.0)
    assert answers and answers[0][0] is True
    assert answers[0][1] < 10.0
    wake.clear()
    assert not wake.is_set()


def test_every_set_of_many_threads_is_seen_by_a_loop_that_waits_then_clears():
    """The claim loop's pattern: wait, clear, work; setters never starve it."""
    wake = WakeFlag()
    rounds = 200
    done = threading.Event()
    seen: list[int] = []
    sent = [0]
    lock = threading.Lock()

    def loop() -> None:
        while not done.is_set():
            if wake.wait(5.0):
                wake.clear()
                with lock:
                    seen.append(sent[0])

    def setter() -> None:
        for _ in range(rounds):
            with lock:
                sent[0] += 1
            wake.set()
            # The next set only once the loop has handled this one: each
            # set must be followed by a wake-up, none may be lost.
            target = sent[0]
            wait_until(
                lambda t=target: seen and seen[-1] >= t, timeout=5, interval=0.001
            )

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        setter()
    finally:
        done.set()
        wake.set()
        thread.join(10.0)
    assert seen[-1] >= rounds


def test_a_due_instant_earlier_than_all_known_wakes_the_loop_later_ones_do_not():
    wake = ClaimWake(IdleBackoff(0.25, 2, 5))
    later = time.monotonic() + 1000
    wake.due(later + 100)
    assert wake.flag.is_set()  # the loop re-reads its wait
    wake.flag.clear()
    wake.due(later + 200)
    assert not wake.flag.is_set()
    wake.due(later + 50)
    assert wake.flag.is_set()
    wake.flag.clear()
    # Already past: its row may have committed after the last claim began.
    wake.due(time.monotonic() - 1)
    assert wake.flag.is_set()


def test_the_next_due_instant_forgets_those_a_claim_covered():
    wake = ClaimWake(IdleBackoff(0.25, 2, 5))
    for at in (30.0, 10.0, 20.0):
        wake.due(at)
    assert wake.next_due(covered=0.0) == 10.0
    assert wake.next_due(covered=10.0) == 20.0  # a claim began at 10: taken
    assert wake.next_due(covered=25.0) == 30.0
    assert wake.next_due(covered=30.0) is None


def test_a_timed_hint_names_its_queue_and_when():
    before = time.monotonic()
    queue, at = split_hint(f"emails\t{round((time.time() + 2) * 1000)}")
    assert queue == "emails"
    assert at is not None and 1.9 < at - before < 2.1
    assert split_hint("emails") == ("emails", None)
    assert split_hint("emails\tsoon") == ("emails", None)
