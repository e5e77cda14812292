"""The outbox: commit-to-visible latency and relay throughput, beside the direct path.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/outbox.py

It (re)creates two databases on the server of ``DATABASE_URL``,
``bench_uj_outbox`` (``default``: the business data and the outbox) and
``bench_uj_outbox_jobs`` (``jobs``: ``ULTIMATE_JOBS["DATABASE"]``), migrates
both, and measures in one run:

(a) **commit → job row visible in the jobs database**, one enqueue per
    transaction on ``default`` (N = 500), with this process's relay thread
    idle between them (woken by the commit callback): from just before the
    COMMIT until a separate connection to ``jobs`` reads the row. Beside it,
    the direct path: the same enqueue inside ``atomic(using="jobs")``, the
    job row inserted in that transaction, measured the same way. Then
    ``outbox_cold``: 10 commits, each after the relay thread's idle window
    (1 s), when it has closed its connections and reconnects to publish;
(b) **relay throughput**: 20,000 messages staged (``enqueue_many``, 1,000
    per transaction) with no relay running, then published by relay passes
    (batch 100, upstream's default, and 1,000) until none is pending.
    Beside it, the direct path: ``enqueue_many`` of 20,000 into ``jobs``,
    1,000 per call.

(c) **the in-process relay** as a user meets it: a committed ``enqueue_many``
    of 10,000 published by this process's relay thread (COMMIT until none
    pending), and 10 threads each committing 200 single enqueues (enqueue
    call until the job row is visible in ``jobs``, p50/p99).

Prints a table and writes ``bench/results/outbox.json``. Targets (issue 13):
(a) p50 ≤ 5 ms and p99 ≤ 15 ms; (b) ≥ 5,000 messages/s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    git_head,
    recreate_database,
    server_url,
)

DEFAULT_DB = bench_db_name("bench_uj_outbox")
JOBS_DB = bench_db_name("bench_uj_outbox_jobs")
RESULTS = ROOT / "bench" / "results" / "outbox.json"
MESSAGES = 20_000
COLD = 10
CHUNK = 1_000
BULK = 10_000
THREADS = 10
PER_THREAD = 200


def setup(default_url: str, jobs_url: str) -> None:
    """Django on the two bench databases (the test settings otherwise); migrate."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    import tests.settings as base
    from django_ultimate_jobs.dburl import database_from_url

    values = {k: getattr(base, k) for k in dir(base) if k.isupper()}
    values["DATABASES"] = {
        "default": database_from_url(default_url),
        "jobs": database_from_url(jobs_url),
    }
    values["ULTIMATE_JOBS"] = {
        "QUEUES": ["default"],
        "DATABASE": "jobs",
        "OUTBOX": True,
    }
    settings.configure(**values)
    django.setup()
    call_command("migrate", verbosity=0)
    call_command("migrate", database="jobs", verbosity=0)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def commit_to_visible(jobs_url: str, count: int) -> dict[str, dict[str, float]]:
    """(a): p50/p99 ms from the COMMIT to the row read in ``jobs``, both paths."""
    import psycopg
    from django.db import transaction

    from django_ultimate_jobs.outbox.relay import local_relay
    from tests.jobsapp.jobs import noop

    probe = psycopg.connect(jobs_url, autocommit=True)

    def visible(job_id: object) -> None:
        while (
            probe.execute(
                "SELECT 1 FROM ultimate_jobs_job WHERE id = %s", (job_id,)
            ).fetchone()
            is None
        ):
            pass

    def outbox() -> float:
        with transaction.atomic():
            answer = noop.enqueue(n=1)
            started = time.perf_counter()
        visible(answer.id)
        return (time.perf_counter() - started) * 1000

    def direct() -> float:
        with transaction.atomic(using="jobs"):
            answer = noop.using(outbox=False).enqueue(n=1)
            started = time.perf_counter()
        visible(answer.id)
        return (time.perf_counter() - started) * 1000

    for _ in range(50):  # warm up both paths, connections and plans
        outbox(), direct()
    results: dict[str, list[float]] = {"outbox": [], "direct": [], "outbox_cold": []}
    for _ in range(count):  # interleaved
        results["outbox"].append(outbox())
        results["direct"].append(direct())
    relay = local_relay()
    for _ in range(COLD):
        # Past the idle window the relay thread has closed its connections:
        # the publish reconnects (a web process committing now and then).
        time.sleep(relay.idle_close_s + 0.2)
        results["outbox_cold"].append(outbox())
    probe.close()
    local_relay().stop()
    return {
        side: {
            "p50_ms": round(statistics.median(v), 3),
            "p99_ms": round(_percentile(v, 0.99), 3),
            "max_ms": round(max(v), 3),
        }
        for side, v in results.items()
    }


def relay_throughput() -> dict[str, float]:
    """(b): messages/s published by relay passes; direct enqueue_many rows/s."""
    from django.db import connections, transaction

    from django_ultimate_jobs.outbox.relay import OutboxRelay
    from django_ultimate_jobs.outbox.store import OutboxStore
    from tests.jobsapp.jobs import noop

    def truncate() -> None:
        for alias in ("default", "jobs"):
            with connections[alias].cursor() as cursor:
                cursor.execute(
                    "TRUNCATE ultimate_jobs_outbox, ultimate_jobs_job CASCADE"
                )

    store, bound = OutboxStore("default"), noop.using()

    def stage() -> None:
        # The store's own stage: no commit callback, so no relay thread
        # publishes behind the measured passes.
        for start in range(0, MESSAGES, CHUNK):
            with transaction.atomic():
                store.stage(
                    [bound.request({"n": n}) for n in range(start, start + CHUNK)]
                )

    rates: dict[str, float] = {}
    for batch in (100, 1_000):
        truncate()
        stage()
        relay = OutboxRelay(batch=batch)
        started = time.perf_counter()
        while relay.run_pass().claimed:
            pass
        elapsed = time.perf_counter() - started
        assert relay.published == MESSAGES, relay.published
        rates[f"relay_batch_{batch}"] = round(MESSAGES / elapsed)
    truncate()
    started = time.perf_counter()
    for start in range(0, MESSAGES, CHUNK):
        noop.using(outbox=False).enqueue_many(
            [{"n": n} for n in range(start, start + CHUNK)]
        )
    rates["direct_enqueue_many"] = round(MESSAGES / (time.perf_counter() - started))
    return rates


def in_process_relay(jobs_url: str) -> dict[str, float]:
    """(c): this process's relay thread, woken by commits, as a user meets it.

    ``enqueue_many`` of 10,000 in one committed transaction: seconds from the
    COMMIT until nothing is pending. Then 10 threads, each committing one
    enqueue per transaction (200 each): per message, staging (the enqueue
    call) to the job row visible in ``jobs``, p50/p99.
    """
    import threading

    import psycopg
    from django.db import connections, transaction

    from django_ultimate_jobs.outbox.relay import local_relay
    from django_ultimate_jobs.outbox.store import OutboxStore
    from tests.jobsapp.jobs import noop

    store = OutboxStore("default")
    for alias in ("default", "jobs"):
        with connections[alias].cursor() as cursor:
            cursor.execute("TRUNCATE ultimate_jobs_outbox, ultimate_jobs_job CASCADE")
    with transaction.atomic():
        noop.enqueue_many([{"n": n} for n in range(BULK)])
        started = time.perf_counter()
    while store.pending():
        time.sleep(0.005)
    bulk_s = time.perf_counter() - started

    latencies: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        probe = psycopg.connect(jobs_url, autocommit=True)
        try:
            for _ in range(PER_THREAD):
                begun = time.perf_counter()
                with transaction.atomic():
                    answer = noop.enqueue(n=1)
                while (
                    probe.execute(
                        "SELECT 1 FROM ultimate_jobs_job WHERE id = %s", (answer.id,)
                    ).fetchone()
                    is None
                ):
                    time.sleep(0.0005)
                with lock:
                    latencies.append((time.perf_counter() - begun) * 1000)
        finally:
            probe.close()
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    local_relay().stop()
    return {
        "bulk_10000_s": round(bulk_s, 3),
        "bulk_per_s": round(BULK / bulk_s),
        "threads_p50_ms": round(statistics.median(latencies), 2),
        "threads_p99_ms": round(_percentile(latencies, 0.99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    args = parser.parse_args()
    url = server_url(DEFAULT_DB, JOBS_DB)
    default_url = recreate_database(url, DEFAULT_DB)
    jobs_url = recreate_database(url, JOBS_DB)
    try:
        setup(default_url, jobs_url)
        latency = commit_to_visible(jobs_url, args.count)
        throughput = relay_throughput()
        inprocess = in_process_relay(jobs_url)
        from django.db import connections

        connections.close_all()
    finally:
        if not args.keep:
            drop_database(url, DEFAULT_DB)
            drop_database(url, JOBS_DB)
    print(
        f"commit -> job visible in jobs, N={args.count} (target p50 <= 5, p99 <= 15 ms)"
    )
    for side, numbers in latency.items():
        print(
            f"  {side:8s} p50 {numbers['p50_ms']:7.2f} ms  p99 {numbers['p99_ms']:7.2f} ms"
        )
    print(f"relay throughput, {MESSAGES} messages (target >= 5,000/s)")
    for name, rate in throughput.items():
        print(f"  {name:22s} {rate:>8,} /s")
    print(
        f"in-process relay: committed enqueue_many of {BULK:,} published in "
        f"{inprocess['bulk_10000_s']} s ({inprocess['bulk_per_s']:,}/s); "
        f"{THREADS} threads, enqueue -> job visible p50 "
        f"{inprocess['threads_p50_ms']} ms, p99 {inprocess['threads_p99_ms']} ms"
    )
    RESULTS.write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "commit": git_head(),
                "python": platform.python_version(),
                "commit_to_visible": latency,
                "throughput_per_s": throughput,
                "in_process_relay": inprocess,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
