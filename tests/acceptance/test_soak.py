"""Soak: thousands of jobs while workers are SIGKILLed over and over (I-OWED).

Two independent ``runjobs --processes 1 --concurrency 8`` workers on a 3 s
lease; every ~2 s one of them is SIGKILLed and a replacement started. At
the end every job must be ``done``; the history checker
(tests/support/history.py) must find nothing lost and no lease overlap.
Duplicated runs are allowed (at-least-once) and counted.

``UJ_SOAK_JOBS`` (default 2000) sets the job count, ``UJ_SOAK_JOB_MS``
(default 100) each body's cooperative wait, ``UJ_SOAK_KILL_S`` (default 20)
how long the kills go on.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from django_ultimate_jobs.models import Job
from tests.jobsapp.jobs import effect
from tests.jobsapp.models import Effect
from tests.support.history import EffectRow, check_queue
from tests.support.waiting import poll_until, wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

JOBS = int(os.environ.get("UJ_SOAK_JOBS", "2000"))
JOB_MS = int(os.environ.get("UJ_SOAK_JOB_MS", "100"))
KILL_PHASE_S = float(os.environ.get("UJ_SOAK_KILL_S", "20"))
KILL_EVERY_S = 2.0
ENQUEUE_CHUNK = 500
LEASE = {"UJ_VISIBILITY": "3s", "UJ_HEARTBEAT": "1s"}


@pytest.mark.timeout(180)
def test_soak_sigkill_loses_nothing_and_never_overlaps(fleet):
    enqueued = []
    for start in range(0, JOBS, ENQUEUE_CHUNK):
        size = min(ENQUEUE_CHUNK, JOBS - start)
        enqueued += [e.id for e in effect.enqueue_many([{"sleep_ms": JOB_MS}] * size)]
    assert len(set(enqueued)) == JOBS

    spawned = 0

    def spawn():
        nonlocal spawned
        spawned += 1
        return fleet.start(
            "--processes", "1", "--concurrency", "8", env=LEASE, name=f"soak-{spawned}"
        )

    def all_done() -> bool:
        return Job.objects.filter(state="done").count() == JOBS

    def progress() -> str:
        states = Counter(Job.objects.values_list("state", flat=True))
        return f"states {dict(states)}\n{fleet.logs()}"

    began = time.monotonic()
    workers = [spawn(), spawn()]
    kills = 0
    # The fault schedule: wait up to KILL_EVERY_S for the run to finish,
    # else SIGKILL the older worker and start a replacement.
    while time.monotonic() - began < KILL_PHASE_S:
        if poll_until(all_done, KILL_EVERY_S, interval=0.1):
            break
        victim = kills % 2
        workers[victim].kill()
        kills += 1
        workers[victim] = spawn()
    wait_until(all_done, 90, interval=0.1, message=progress)
    elapsed = time.monotonic() - began

    effects = [EffectRow.of(e) for e in Effect.objects.all()]
    done = Job.objects.filter(state="done").values_list("id", flat=True)
    history = check_queue(enqueued, done, effects)
    runs = Counter(e.job_id for e in effects)
    attempts = Counter(Job.objects.values_list("attempt", flat=True))
    print(
        f"\nsoak: jobs={JOBS} kills={kills} duplicates={len(history.duplicated)} "
        f"extra_runs={sum(runs.values()) - JOBS} lost={len(history.lost)} "
        f"overlaps={len(history.overlaps)} elapsed={elapsed:.1f}s "
        f"(workers={spawned}, job_ms={JOB_MS}, attempts={dict(sorted(attempts.items()))})"
    )
    assert history.lost == [], history.summary()
    assert history.unexpected == [], history.summary()
    assert history.overlaps == [], history.overlaps[:5]
    assert kills >= 1, "the run ended before any worker was killed: raise UJ_SOAK_JOBS"
