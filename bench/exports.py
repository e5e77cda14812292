"""An export of 100,000 and of 1,000,000 rows: the worker's peak RSS, rows/s.

For each size, the bench database's ``jobsapp_exportitem`` is filled with
that many rows (every export column type: text with formula cells, NULLs,
decimals, floats, datetimes, dates, durations, UUIDs, JSON), then one
``runjobs`` process runs the ``bench.rows`` export (``bench/benchjobs``:
CSV, 5,000 rows a part, into a temporary folder) and its peak RSS (VmHWM,
read every 20 ms) is taken when the export is done; then a fresh
``runjobs`` runs the ``bench.rows`` import of that artifact into
``jobsapp_exportitemcopy`` and its peak is taken the same way. Memory is
flat when the peak at 1,000,000 rows is within a few MiB of the peak at
100,000 (a pass holds one page, never the source).

    ./dev run python bench/exports.py                   # --sizes 100000,1000000
    ./dev run python bench/exports.py --sizes 20000     # a quick check
    ./dev run python bench/exports.py --no-import       # the export only
    BENCH_EXPORT_FORMAT=ndjson ./dev run python bench/exports.py

``--keep`` keeps the database. Writes ``bench/results/exports.json``
(``exports-ndjson.json`` for NDJSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    SETTINGS,
    WorkerProcess,
    bench_db_name,
    child_env,
    drop_database,
    fail,
    git_head,
    migrate_in_subprocess,
    recreate_database,
    server_url,
    setup_django,
    stop_on_sigterm,
    wait_until_ready,
)

DB_NAME = bench_db_name("bench_uj_exports")
NAME = "bench.rows"
PASS_TIMEOUT_S = 3600.0
POLL_S = 0.2

_LOAD = """
INSERT INTO jobsapp_exportitem
       (grp, name, note, amount, ratio, flag, at, day, span, uid, data)
SELECT 1,
       CASE WHEN n %% 7 = 0 THEN '=HYPERLINK("https://example.com/' || n || '")'
            ELSE 'item number ' || n END,
       CASE WHEN n %% 3 = 0 THEN NULL ELSE 'a note, "quoted", on row ' || n END,
       n * 1.25, CASE WHEN n %% 4 = 0 THEN NULL ELSE n / 7.0 END, n %% 2 = 0,
       timestamptz '2026-01-01' + n * interval '1 second',
       date '2026-01-01' + n %% 365, n * interval '1 millisecond',
       md5(n::text)::uuid,
       CASE WHEN n %% 5 = 0 THEN NULL ELSE jsonb_build_object('n', n, 'tag', 'x') END
  FROM generate_series(1, %s) AS n
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--no-import", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    base_url = server_url(DB_NAME)
    stop_on_sigterm()
    folder = tempfile.mkdtemp(prefix="uj-bench-exports-")
    os.environ["BENCH_EXPORT_DIR"] = folder
    bench_url = recreate_database(base_url, DB_NAME)
    try:
        migrate_in_subprocess(bench_url)
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        setup_django(bench_url)
        runs = [measure(size, bench_url, load=not args.no_import) for size in sizes]
        report(runs)
        fmt = os.environ.get("BENCH_EXPORT_FORMAT", "csv")
        name = "exports.json" if fmt == "csv" else f"exports-{fmt}.json"
        out = ROOT / "bench" / "results" / name
        out.write_text(
            json.dumps(
                {
                    "commit": git_head(),
                    "format": fmt,
                    "load": os.getloadavg(),
                    "runs": runs,
                },
                indent=2,
            )
            + "\n"
        )
    finally:  # also on Ctrl-C or SIGTERM
        from django.db import connections

        connections.close_all()
        shutil.rmtree(folder, ignore_errors=True)
        if not args.keep:
            drop_database(base_url, DB_NAME)


def measure(size: int, bench_url: str, *, load: bool) -> dict:
    from django.db import connection

    from django_ultimate_jobs.exports import get_export, get_import
    from django_ultimate_jobs.models import Export, Import

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE jobsapp_exportitem, jobsapp_exportitemcopy RESTART IDENTITY"
        )
        started = time.perf_counter()
        cursor.execute(_LOAD, [size])
        loaded_s = time.perf_counter() - started
    print(f"exports: {size:,} rows loaded in {loaded_s:.1f}s", file=sys.stderr)
    prefix = f"bench/{size}"
    run = {"rows": size, "load_s": round(loaded_s, 1)}
    run["export"] = timed_pass(
        bench_url,
        lambda: get_export(NAME).enqueue(prefix=prefix, force=True),
        lambda: Export.objects.get(name=NAME, prefix=prefix),
        f"export of {size:,} rows",
    )
    row = Export.objects.get(name=NAME, prefix=prefix)
    run["export"].update(parts=row.pages_done, bytes=row.bytes)
    if load:
        run["import"] = timed_pass(
            bench_url,
            lambda: get_import(NAME).enqueue(prefix=prefix, force=True),
            lambda: Import.objects.get(name=NAME, prefix=prefix),
            f"import of {size:,} rows",
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM jobsapp_exportitemcopy")
            (loaded,) = cursor.fetchone()
        if loaded != size:
            fail(f"the import loaded {loaded:,} rows, not {size:,}")
    return run


def timed_pass(bench_url: str, enqueue, record, what: str) -> dict:
    """Run one pass on a fresh worker; its time, rows/s and the worker's memory."""
    worker = start_worker(bench_url)
    try:
        idle = rss_mib(worker.popen.pid)
        started = time.perf_counter()
        enqueue()
        deadline = time.monotonic() + PASS_TIMEOUT_S
        while (row := record()).state != "done":
            if row.state == "failed" or worker.popen.poll() is not None:
                fail(f"the {what} failed: {row.error}\n{worker.output()}")
            if time.monotonic() > deadline:
                fail(f"the {what} took longer than {PASS_TIMEOUT_S:.0f}s")
            time.sleep(POLL_S)  # the poll interval of following a pass
        elapsed = time.perf_counter() - started
    finally:
        worker.terminate()
    result = {
        "seconds": round(elapsed, 1),
        "rows_per_s": round(row.rows_done / elapsed),
        "idle_rss_mib": round(idle, 1),
        "peak_rss_mib": round(worker.max_rss_mib, 1),
    }
    print(f"exports: {what}: {json.dumps(result)}", file=sys.stderr)
    return result


def start_worker(bench_url: str) -> WorkerProcess:
    argv = [sys.executable, "-m", "django", "runjobs", "--settings", SETTINGS]
    argv += ["--queues", "default", "--no-scheduler"]
    proc = WorkerProcess(argv, child_env(bench_url), "runjobs ")
    try:
        wait_until_ready([proc])
    except BaseException:
        proc.popen.kill()
        raise
    return proc


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def report(runs: list[dict]) -> None:
    print(
        "| rows | pass | seconds | rows/s | worker RSS at start (MiB) | peak RSS (MiB) |"
    )
    print("|---:|---|---:|---:|---:|---:|")
    for run in runs:
        for kind in ("export", "import"):
            if kind in run:
                r = run[kind]
                print(
                    f"| {run['rows']:,} | {kind} | {r['seconds']} | {r['rows_per_s']:,} "
                    f"| {r['idle_rss_mib']} | {r['peak_rss_mib']} |"
                )


if __name__ == "__main__":
    main()
