"""The Redis driver beside Celery (Redis broker) and the PostgreSQL driver.

Run from the repository root (after ``pip install -r bench/requirements.txt``)::

    BENCH_TP_BROKERS=1 ./dev run python bench/throughput.py
    ./dev run python bench/brokers.py          # the same

One run on one machine, the three systems interleaved in each round:

- ``ours/redis``: ``runjobs --concurrency 8`` on the Redis driver;
- ``celery/redis``: ``celery worker --pool threads --concurrency 8`` on a Redis
  broker (Celery's defaults otherwise: early ack, prefetch multiplier 4);
- ``ours/postgres``: ``runjobs --concurrency 8`` on the PostgreSQL driver.

Both Redis systems use one ``redis-server`` this bench starts on a free port
with AOF on (``appendfsync everysec``, the setting docs/howto/redis.md
recommends). Workloads:

1. drain: N pre-enqueued no-op jobs, then N 5 ms jobs, one worker process.
   The worker starts behind a gate (our queue paused, Celery consuming an
   empty queue); start = the gate's opening (resume / ``add_consumer``),
   end = the first 10 ms poll that sees N done (our rows' states, Celery's
   ``INCR`` per task);
2. pickup: one idle worker; jobs enqueued one by one, 20 ms apart; latency
   = handler start - the moment ``enqueue()`` / ``delay()`` returned.

Knobs: ``BENCH_BR_JOBS`` (10000), ``BENCH_BR_LATENCY_JOBS`` (200),
``BENCH_BR_ROUNDS`` (3). Results: ``bench/results/brokers.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    SETTINGS,
    WorkerProcess,
    bench_db_name,
    child_env,
    die_with_parent,
    git_head,
    hold_bench_lock,
    migrate_in_subprocess,
    recreate_database,
    server_url,
    wait_until_ready,
    with_database,
)

BENCH_DB = bench_db_name("ultimate_jobs_bench_brokers")
JOBS = int(os.environ.get("BENCH_BR_JOBS", "10000"))
LATENCY_JOBS = int(os.environ.get("BENCH_BR_LATENCY_JOBS", "200"))
ROUNDS = int(os.environ.get("BENCH_BR_ROUNDS", "3"))
THREADS = 8
LATENCY_GAP_S = 0.020
POLL_S = 0.010
QUEUE = "default"
REDIS, CELERY, PG = "ours/redis", "celery/redis", "ours/postgres"
SYSTEMS = tuple(
    s for s in (REDIS, CELERY, PG) if s in os.environ.get("BENCH_BR_ONLY", s)
)


def start_redis() -> tuple[subprocess.Popen[bytes], str, Path]:
    """A redis-server of the bench's own (AOF, everysec) on a free port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = Path(tempfile.mkdtemp(prefix="uj-bench-redis-"))
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    client = redis.Redis.from_url(url)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    return process, url, data


class Ours:
    """Our worker on one driver, timed through that driver's rows."""

    def __init__(self, system: str, bench_url: str, redis_url: str) -> None:
        from django_ultimate_jobs.drivers.postgres import PostgresDriver
        from django_ultimate_jobs.drivers.redis import RedisDriver

        self.system = system
        self.env = child_env(bench_url)
        if system == REDIS:
            self.prefix = f"bench-{uuid.uuid4().hex[:8]}"
            self.env.update(BENCH_REDIS_URL=redis_url, BENCH_REDIS_PREFIX=self.prefix)
            self.driver: Any = RedisDriver(redis_url, prefix=self.prefix)
        else:
            self.driver = PostgresDriver()
        # Where bench.latency_redis writes its start time (either driver).
        self.env.update(BENCH_LATENCY_REDIS=redis_url)
        import redis

        self.redis = redis.Redis.from_url(redis_url, decode_responses=True)

    def spawn(self) -> WorkerProcess:
        argv = [
            sys.executable,
            "-m",
            "django",
            "runjobs",
            "--settings",
            SETTINGS,
            "--concurrency",
            str(THREADS),
            "--queues",
            QUEUE,
            "--no-housekeeping",
        ]
        return WorkerProcess(argv, self.env, "runjobs ")

    def reset(self) -> None:
        from django_ultimate_jobs.drivers.base import JobFilter

        self.driver.resume_queue(QUEUE)
        while self.driver.remove_many(JobFilter(queue=QUEUE), limit=1000).affected:
            pass

    def done(self) -> int:
        from django_ultimate_jobs.drivers.base import JobFilter
        from django_ultimate_jobs.states import JobState

        return self.driver.count(
            JobFilter(queue=QUEUE, states=frozenset({JobState.DONE}))
        )

    def drain(self, work: str) -> float:
        from django_ultimate_jobs.drivers.base import EnqueueRequest

        self.reset()
        self.driver.pause_queue(QUEUE)
        request = EnqueueRequest(name=f"bench.{work}", input={}, queue=QUEUE)
        for start in range(0, JOBS, 2000):
            self.driver.enqueue_many([request] * min(2000, JOBS - start))
        proc = self.spawn()
        try:
            wait_until_ready([proc])
            time.sleep(0.5)  # into its idle claim loop
            started = time.time()
            self.driver.resume_queue(QUEUE)
            return JOBS / (poll_until(self.done, JOBS) - started)
        finally:
            proc.terminate()

    def pickups(self) -> list[float]:
        from django_ultimate_jobs.drivers.base import EnqueueRequest

        self.reset()
        self.redis.delete("bench:ours:started")
        name = "bench.latency_redis"
        proc = self.spawn()
        try:
            wait_until_ready([proc])
            time.sleep(2.0)  # the wake probe has come back
            returned: dict[str, float] = {}
            for _ in range(LATENCY_JOBS):
                job = self.driver.enqueue(
                    EnqueueRequest(name=name, input={}, queue=QUEUE)
                )
                returned[str(job.id)] = time.time()
                time.sleep(LATENCY_GAP_S)
            poll_until(lambda: self.redis.hlen("bench:ours:started"), LATENCY_JOBS)
            started = self.redis.hgetall("bench:ours:started")
            return [(float(started[i]) - t) * 1000 for i, t in returned.items()]
        finally:
            proc.terminate()


class CeleryWorker:
    """Celery's worker on the bench's Redis broker."""

    def __init__(self, redis_url: str) -> None:
        import redis

        os.environ["BENCH_CELERY_BROKER"] = redis_url
        from bench.benchjobs import celery_app

        self.app = celery_app
        self.env = {**child_env(""), "BENCH_CELERY_BROKER": redis_url}
        self.redis = redis.Redis.from_url(redis_url, decode_responses=True)

    def spawn(self, queue: str) -> WorkerProcess:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.benchjobs.celery_app",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(THREADS),
            "-Q",
            queue,
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"bench-{uuid.uuid4().hex[:6]}@%h",
        ]
        return CeleryProcess(argv, self.env, "")

    def reset(self) -> None:
        self.redis.delete("bench", "staged", celery_done(), "bench:celery:started")

    def drain(self, work: str) -> float:
        self.reset()
        task = getattr(self.app, work)
        with self.app.app.producer_or_acquire() as producer:
            for _ in range(JOBS):
                task.apply_async(queue="staged", producer=producer)
        proc = self.spawn("bench")
        try:
            wait_until_ready([proc])
            time.sleep(0.5)
            started = time.time()
            # The gate: every staged message moved onto the worker's queue
            # in one script (an RPUSH wakes the worker's BRPOP).
            self.redis.eval(_OPEN_GATE, 2, "staged", "bench")
            done = lambda: int(self.redis.get(celery_done()) or 0)  # noqa: E731
            return JOBS / (poll_until(done, JOBS) - started)
        finally:
            proc.terminate()

    def pickups(self) -> list[float]:
        self.reset()
        proc = self.spawn("bench")
        try:
            wait_until_ready([proc])
            time.sleep(2.0)
            returned: dict[str, float] = {}
            for _ in range(LATENCY_JOBS):
                job_id = uuid.uuid4().hex
                self.app.latency.apply_async((job_id,), queue="bench")
                returned[job_id] = time.time()
                time.sleep(LATENCY_GAP_S)
            poll_until(lambda: self.redis.hlen("bench:celery:started"), LATENCY_JOBS)
            started = self.redis.hgetall("bench:celery:started")
            return [(float(started[i]) - t) * 1000 for i, t in returned.items()]
        finally:
            proc.terminate()


class CeleryProcess(WorkerProcess):
    """A Celery worker: ready once it logs ``<name>@<host> ready.``."""

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if self.ready_at is None and line.rstrip().endswith(" ready."):
                self.ready_at = time.time()
                self.ready.set()
            self.lines.append(line.rstrip("\n"))


_OPEN_GATE = """
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #items, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + 999, #items)))
end
redis.call('DEL', KEYS[1])
return #items
"""


def celery_done() -> str:
    return "bench:celery:done"


def poll_until(count: Any, target: int, timeout: float = 600) -> float:
    """Poll ``count()`` every 10 ms; the time it first reached ``target``."""
    give_up = time.monotonic() + timeout
    while True:
        now = time.time()
        if count() >= target:
            return now
        if time.monotonic() > give_up:
            raise TimeoutError(f"{count()} of {target} after {timeout} s")
        time.sleep(POLL_S)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    base_url = server_url(BENCH_DB)
    bench_url = with_database(base_url, BENCH_DB)
    lock = hold_bench_lock(base_url, BENCH_DB)  # noqa: F841 (held until exit)
    recreate_database(base_url, BENCH_DB)
    migrate_in_subprocess(bench_url)
    os.environ.update(DATABASE_URL=bench_url, DJANGO_SETTINGS_MODULE=SETTINGS)
    import django

    django.setup()
    server, redis_url, data = start_redis()
    try:
        systems: dict[str, Any] = {
            REDIS: Ours(REDIS, bench_url, redis_url),
            CELERY: CeleryWorker(redis_url),
            PG: Ours(PG, bench_url, redis_url),
        }
        rounds: dict[str, dict[str, list[float]]] = {
            s: {"noop": [], "sleep5": [], "p50": [], "p99": []} for s in SYSTEMS
        }
        for number in range(ROUNDS):
            for name in SYSTEMS:
                system = systems[name]
                entry = rounds[name]
                entry["noop"].append(system.drain("noop"))
                entry["sleep5"].append(system.drain("sleep5"))
                latencies = system.pickups()
                entry["p50"].append(percentile(latencies, 0.50))
                entry["p99"].append(percentile(latencies, 0.99))
                print(
                    f"round {number + 1} {name:14} noop {entry['noop'][-1]:8.0f}/s "
                    f"5ms {entry['sleep5'][-1]:7.0f}/s pickup p50 "
                    f"{entry['p50'][-1]:6.2f} ms p99 {entry['p99'][-1]:6.2f} ms",
                    file=sys.stderr,
                )
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    summary = {
        name: {k: statistics.median(v) for k, v in entry.items()}
        for name, entry in rounds.items()
    }
    print()
    print(f"{JOBS:,} jobs per drain, {LATENCY_JOBS} pickups, {ROUNDS} rounds (medians)")
    print(
        f"{'system':16} {'no-op drain/s':>14} {'5 ms drain/s':>13} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for name in SYSTEMS:
        s = summary[name]
        print(
            f"{name:16} {s['noop']:14.0f} {s['sleep5']:13.0f} {s['p50']:8.2f} {s['p99']:8.2f}"
        )
    celery, ours = summary[CELERY], summary[REDIS]
    print(
        f"ours/redis vs celery/redis: drain {ours['noop'] / celery['noop']:.2f}x (no-op), "
        f"{ours['sleep5'] / celery['sleep5']:.2f}x (5 ms); pickup p50 "
        f"{ours['p50']:.2f} vs {celery['p50']:.2f} ms"
    )
    results = ROOT / "bench" / "results" / "brokers.json"
    results.write_text(
        json.dumps(
            {
                "commit": git_head(),
                "at": datetime.now(UTC).isoformat(),
                "jobs": JOBS,
                "latency_jobs": LATENCY_JOBS,
                "rounds": rounds,
                "summary": summary,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
