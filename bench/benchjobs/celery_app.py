"""The Celery side of bench/brokers.py: the same three bodies as our bench
jobs, on a Redis broker (``BENCH_CELERY_BROKER``), no result backend.

Each body counts itself done with one ``INCR`` (drains) or stores its start
time with one ``HSET`` (pickup latency) on the broker's server; our Redis
driver's workers are timed through the store itself, so Celery's bodies pay
one round trip ours do not.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0")
DONE_KEY = "bench:celery:done"
STARTED_KEY = "bench:celery:started"

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
_client = redis.Redis.from_url(BROKER)


@app.task(name="bench.noop")
def noop() -> None:
    _client.incr(DONE_KEY)


@app.task(name="bench.sleep5")
def sleep5() -> None:
    time.sleep(0.005)
    _client.incr(DONE_KEY)


@app.task(name="bench.latency")
def latency(job_id: str) -> None:
    _client.hset(STARTED_KEY, job_id, repr(time.time()))
