"""Fleet throughput under a keyed concurrency limit, beside the same work uncapped.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/limits.py

It (re)creates the database ``ultimate_jobs_bench_limits`` on the server of
``DATABASE_URL``, migrates it with ``bench.bench_settings``, then drains, in
one run and interleaved, ``BENCH_LIMITS_JOBS`` (3,000) jobs of 5 ms spread
round-robin over 100 keys with three ``runjobs --burst`` processes of 8
threads each:

- capped: ``bench.keyed5``, ``Concurrency(key=<key>, limit=1)`` (the workers
  declare it: ``BENCH_LIMIT_JOBS=1``, so they run the capped claim);
- free: ``bench.free5``, the same body and input without a limit, by workers
  that declare no limit (the claim a project without limits runs).

Timing as bench/throughput.py: the processes start behind a lock on the job
table, start = the lock's release, end = the newest ``updated_at`` of the
done rows. Target: capped >= 0.7x free (issue 14). That no key ever runs
twice at once is proven by tests/acceptance/test_limits_fleet.py, not here.
Writes ``bench/results/limits.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    SETTINGS,
    WorkerProcess,
    bench_db_name,
    child_env,
    git_head,
    hold_bench_lock,
    recreate_database,
    server_url,
    start_behind_gate,
    with_database,
)
from bench.throughput import execute, reset_tables, setup_django  # noqa: E402

BENCH_DB = bench_db_name("ultimate_jobs_bench_limits")
RESULTS = ROOT / "bench" / "results" / "limits.json"
JOBS = int(os.environ.get("BENCH_LIMITS_JOBS", "3000"))
ROUNDS = int(os.environ.get("BENCH_LIMITS_ROUNDS", "3"))
KEYS = 100
PROCESSES = int(os.environ.get("BENCH_LIMITS_PROCESSES", "3"))
THREADS = 8
TARGET = 0.7
# The bench's own queue: runjobs also serves the housekeeping queue, whose
# cron jobs may finish during a round.
COUNT_DONE = (
    "SELECT count(*) FROM ultimate_jobs_job WHERE state = 'done' AND queue = 'limits'"
)


def drain(bench_url: str, capped: bool) -> dict:
    """One round: enqueue, start the fleet behind the gate, time the drain."""
    from django_ultimate_jobs.registry import get_job

    reset_tables()
    execute("TRUNCATE ultimate_jobs_lease")
    name = "bench.keyed5" if capped else "bench.free5"
    handle = get_job(name)
    handle.enqueue_many([{"key": n % KEYS} for n in range(JOBS)])
    execute("ANALYZE ultimate_jobs_job")
    env = child_env(bench_url)
    env.pop("BENCH_LIMIT_JOBS", None)
    if capped:
        env["BENCH_LIMIT_JOBS"] = "1"
    argv = [
        sys.executable, "-m", "django", "runjobs", "--settings", SETTINGS,
        "--concurrency", str(THREADS), "--queues", "limits",
    ]  # fmt: skip
    gated = start_behind_gate(
        bench_url, lambda: WorkerProcess(argv, env, "runjobs "), PROCESSES
    )
    procs, started = gated.procs, gated.started
    # Not --burst: under a cap a claim can find nothing while other keys
    # still run, and a burst worker would leave. The fleet runs until every
    # job is done, then drains.
    deadline = time.monotonic() + 300
    while (done := execute(COUNT_DONE)[0][0]) < JOBS and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in procs:
        proc.terminate()
    done, last_done = execute(
        "SELECT count(*), extract(epoch FROM max(updated_at)) "
        "FROM ultimate_jobs_job WHERE state = 'done' AND queue = 'limits'"
    )[0]
    if done != JOBS:
        detail = "\n---\n".join(p.output() for p in procs)
        raise RuntimeError(f"{name}: {done}/{JOBS} done\n{detail}")
    seconds = float(last_done) - started
    return {"seconds": seconds, "rate": JOBS / seconds}


def main() -> None:
    base_url = server_url(BENCH_DB)
    bench_url = with_database(base_url, BENCH_DB)
    print(
        f"bench database {BENCH_DB}; {JOBS:,} jobs over {KEYS} keys, {ROUNDS} rounds, "
        f"{PROCESSES} x {THREADS}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}",
        file=sys.stderr,
    )
    lock = hold_bench_lock(base_url, BENCH_DB)  # noqa: F841 (held until exit)
    commit = git_head()
    recreate_database(base_url, BENCH_DB)
    setup_django(bench_url)
    import bench.benchjobs.limit_jobs  # noqa: F401 (this process enqueues them)

    rounds: dict[str, list[dict]] = {"free": [], "capped": []}
    for index in range(ROUNDS):
        for label in ("free", "capped"):
            result = drain(bench_url, capped=label == "capped")
            rounds[label].append(result)
            print(
                f"  round {index + 1}/{ROUNDS} {label:7} {result['rate']:8.0f} jobs/s",
                file=sys.stderr,
                flush=True,
            )
    free = statistics.median(r["rate"] for r in rounds["free"])
    capped = statistics.median(r["rate"] for r in rounds["capped"])
    ratio = capped / free
    print(f"\nfree   {free:8.0f} jobs/s (median)")
    print(f"capped {capped:8.0f} jobs/s (median), keyed limit 1 over {KEYS} keys")
    print(
        f"ratio  {ratio:8.2f}x  (target >= {TARGET}x: {'met' if ratio >= TARGET else 'MISSED'})"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "bench": "limits",
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "commit": commit,
                "cpus": os.cpu_count(),
                "jobs": JOBS,
                "keys": KEYS,
                "processes": PROCESSES,
                "threads": THREADS,
                "rounds": ROUNDS,
                "target": TARGET,
                "summary": {
                    "free": free,
                    "capped": capped,
                    "ratio": ratio,
                },
                "per_round": rounds,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
