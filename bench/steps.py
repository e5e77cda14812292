"""What a durable step costs: a 10-step job beside a plain job.

Both jobs run through the real worker path (``run_jobs()``: claim, executor,
settle) on PostgreSQL, one at a time in this process, so the difference is
the steps alone. Round trips are counted at the driver (every statement
goes through ``PostgresDriver._rows``).

    ./dev run python bench/steps.py          # N=300 jobs of each kind

Targets (issue 4): one write per completed step, <= 1 ms added per step.
Writes bench/results/steps.json.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_db_name,
    drop_database,
    recreate_database,
    server_url,
    setup_django,
)

DB_NAME = bench_db_name("ultimate_jobs_bench_steps")
N = int(os.environ.get("BENCH_STEPS_JOBS", "300"))
STEPS = 10


def main() -> None:
    base_url = server_url(DB_NAME)
    bench_url = recreate_database(base_url, DB_NAME)
    try:
        setup_django(bench_url)

        from django_ultimate_jobs import job
        from django_ultimate_jobs.drivers import get_driver
        from django_ultimate_jobs.testing import run_jobs

        driver = get_driver()
        statements: Counter[str] = Counter()
        original = driver._rows

        def counting(name, params):
            statements[name] += 1
            return original(name, params)

        driver._rows = counting  # type: ignore[method-assign]

        @job(name="bench.plain", queue="bench-steps")
        def plain(ctx, *, n: int):
            return {"n": n}

        @job(name="bench.ten_steps", queue="bench-steps")
        def ten_steps(ctx, *, n: int):
            for index in range(STEPS):
                ctx.step.run(f"step-{index}", lambda i=index: {"i": i, "n": n})
            return {"n": n}

        results = {}
        for handle in (plain, ten_steps, plain, ten_steps):
            timings = []
            statements.clear()
            for n in range(N):
                handle.enqueue(n=n)
                started = time.perf_counter()
                (execution,) = run_jobs(queues=["bench-steps"], driver=driver)
                timings.append((time.perf_counter() - started) * 1000)
                assert execution.outcome == "completed", execution
            results[handle.name] = {
                "median_ms": statistics.median(timings),
                "p95_ms": sorted(timings)[int(len(timings) * 0.95)],
                "statements_per_job": {k: v / N for k, v in sorted(statements.items())},
            }
        plain_ms = results["bench.plain"]["median_ms"]
        steps_ms = results["bench.ten_steps"]["median_ms"]
        per_step = (steps_ms - plain_ms) / STEPS
        step_writes = results["bench.ten_steps"]["statements_per_job"].get(
            "step_put", 0
        )
        summary = {
            "jobs": N,
            "steps_per_job": STEPS,
            "plain_job_ms": round(plain_ms, 3),
            "ten_step_job_ms": round(steps_ms, 3),
            "added_ms_per_step": round(per_step, 3),
            "step_writes_per_completed_step": step_writes / STEPS,
            "statements": {k: v["statements_per_job"] for k, v in results.items()},
            "targets": {"writes_per_step": 1, "added_ms_per_step": 1.0},
        }
        print(json.dumps(summary, indent=2))
        out = ROOT / "bench" / "results" / "steps.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(summary, indent=2) + "\n")
    finally:  # also on Ctrl-C or SIGTERM
        from django.db import connections

        connections.close_all()
        drop_database(base_url, DB_NAME)


if __name__ == "__main__":
    main()
