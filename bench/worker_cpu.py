"""Where one worker process's CPU goes per no-op job: per thread, and the collector.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/worker_cpu.py            # 30,000 jobs
    ./dev run python bench/worker_cpu.py 60000 --heap-as-is

It (re)creates the database ``bench_uj_worker_cpu`` (dropped at the end),
migrates it with ``bench.bench_settings``, enqueues N ``bench.noop`` jobs and
drains them with ``runjobs --burst --concurrency 8`` run *in this process*
(``call_command``), so that each thread's CPU can be read with
``time.thread_time()`` when its function returns: the claim loop, the eight
slots together, the settler, the keeper. The garbage collector's own CPU is
read around each collection (``gc.callbacks``). It also times the claim and
ack statements (wall, Python decode included) and counts the claim loop's
pauses for capacity. ``--heap-as-is`` skips what ``runjobs`` does to the
collector at start (``worker/heap.py``), to measure what that saves (without
it, this bench calls it before the drain, outside the measured collections).

The figures are per job, boot excluded. Unlike a rate, they move little with
what else runs on a shared machine. Prints one table; writes nothing.
"""

from __future__ import annotations

import collections
import gc
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import throughput as tp  # noqa: E402
from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    recreate_database,
    server_url,
)

DB = bench_db_name("bench_uj_worker_cpu")
# The body of each worker thread: (module, class, method) -> its row.
THREADS = {
    ("claimloop", "ClaimLoop", "run"): "claim loop",
    ("slots", "SlotPool", "_main"): "slots (8)",
    ("settle", "SettleLoop", "run"): "settler",
    ("keeper", "Keeper", "run"): "keeper",
}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    jobs = int(args[0]) if args else 30_000
    heap_as_is = "--heap-as-is" in sys.argv
    base = server_url(DB)
    url = recreate_database(base, DB)
    try:
        tp.setup_django(url)
        tp.reset_tables()
        tp.enqueue_pending("bench.noop", jobs)
        run(jobs, heap_as_is)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(base, DB)


def run(jobs: int, heap_as_is: bool) -> None:
    import importlib

    from django.core.management import call_command

    from django_ultimate_jobs.drivers.postgres import PostgresDriver
    from django_ultimate_jobs.worker import claimloop, heap

    thread_cpu: dict[str, float] = collections.defaultdict(float)
    wall: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()

    def per_thread(module: str, owner: str, name: str, label: str) -> None:
        cls = getattr(
            importlib.import_module(f"django_ultimate_jobs.worker.{module}"), owner
        )
        original = getattr(cls, name)

        def measured(*args, **kwargs):  # type: ignore[no-untyped-def]
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                thread_cpu[label] += time.thread_time() - started

        setattr(cls, name, measured)

    def timed(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def measured(*args, **kwargs):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                wall[name] += time.perf_counter() - started
                calls[name] += 1

        setattr(cls, name, measured)

    for (module, owner, name), label in THREADS.items():
        per_thread(module, owner, name, label)
    timed(PostgresDriver, "claim")
    timed(PostgresDriver, "ack_many")
    timed(claimloop.ClaimLoop, "_pause")
    collector = {"cpu": 0.0, "started": 0.0}
    collections_by_gen: collections.Counter[int] = collections.Counter()

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            collector["started"] = time.thread_time()
        else:
            collector["cpu"] += time.thread_time() - collector["started"]
            collections_by_gen[info["generation"]] += 1

    if heap_as_is:
        heap._settled = True  # runjobs' settle_heap() becomes a no-op
    else:
        heap.settle_heap()  # here, so its one full collection is not counted
    gc.callbacks.append(on_gc)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    call_command("runjobs", concurrency=8, queues="default", burst=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    gc.callbacks.remove(on_gc)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    per_job = 1e6 / jobs
    print(f"\n{jobs:,} no-op jobs, heap {'as is' if heap_as_is else 'settled'}")
    print(f"{'rate (wall, boot included)':32} {jobs / seconds:10,.0f} jobs/s")
    print(f"{'process CPU':32} {cpu * per_job:10.1f} us/job")
    for label, value in sorted(thread_cpu.items(), key=lambda kv: -kv[1]):
        print(f"{'  ' + label:32} {value * per_job:10.1f} us/job")
    print(
        f"{'  garbage collector (in those)':32} {collector['cpu'] * per_job:10.1f} "
        f"us/job  collections by generation {dict(sorted(collections_by_gen.items()))}"
    )
    for name in ("claim", "ack_many", "_pause"):
        mean = wall[name] / max(calls[name], 1) * 1000
        print(f"{name:32} {calls[name]:10,} calls, mean {mean:.2f} ms (wall)")


if __name__ == "__main__":
    main()
