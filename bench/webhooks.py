"""Webhooks: deliveries/s beside a bare client loop; the receiver beside a bare view.

Run from the repository root (see bench/README.md)::

    ./dev run python bench/webhooks.py [--events 200] [--endpoints 50]
                                       [--requests 5000] [--rounds 3]

It (re)creates ``bench_uj_webhooks`` on the server of ``DATABASE_URL``,
migrates it, and measures, each round:

(a) **sender**: ``--endpoints`` endpoints (50) on one local endpoint server
    (gunicorn, ``gthread``, a WSGI app that answers 200 without Django), and
    ``--events`` events delivered to every one (200 x 50 = 10,000 deliveries,
    written by ``deliver()`` before the clock starts). One ``runjobs
    --concurrency 8 --burst`` sends them, started behind the job-table gate
    (its startup is not counted): deliveries/s from the gate's opening to
    the last ``delivered_at``. Beside it, in the same round, the bare loop:
    8 threads of the same HTTP client (urllib3, one pool) POST the same
    number of bodies to the same 50 URLs, nothing else. Target (issue 23):
    ours >= 0.5x the bare loop.
(b) **receiver**: gunicorn (``gthread``, 2 workers x 4 threads) serving
    Django with a ``webhook_receiver`` (verify the signature, insert the
    dedupe row, run a no-op handle, commit, answer 200) and a bare view that
    reads the body and answers 200; 8 client threads POST ``--requests``
    pre-signed requests (each its own ``webhook-id``) to each: requests/s.

gunicorn is the production WSGI server of the comparison: ``runserver`` is
single-threaded per request in spirit and not what a receiver runs behind.

Prints a table and writes ``bench/results/webhooks.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    WorkerProcess,
    bench_db_name,
    child_env,
    drop_database,
    git_head,
    recreate_database,
    server_url,
    setup_django,
    start_behind_gate,
)

DB = bench_db_name("bench_uj_webhooks")
RESULTS = ROOT / "bench" / "results" / "webhooks.json"
SETTINGS = "bench.webhook_settings"
THREADS = 8
BODY = json.dumps({"type": "invoice.paid", "data": {"invoice": 42, "pad": "x" * 200}})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_port(port: int, proc: WorkerProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{proc.output()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"gunicorn did not listen on {port}:\n{proc.output()}")


def gunicorn(app: str, port: int, env: dict[str, str], workers: int, threads: int):
    argv = [
        sys.executable, "-m", "gunicorn", app,
        "--bind", f"127.0.0.1:{port}",
        "--workers", str(workers),
        "--worker-class", "gthread",
        "--threads", str(threads),
        "--keep-alive", "30",
        "--log-level", "warning",
    ]  # fmt: skip
    proc = WorkerProcess(argv, env, "")
    _wait_port(port, proc)
    return proc


def _hammer(pool, requests: list[tuple[str, bytes, dict[str, str]]], threads: int):
    """POST ``requests`` from ``threads`` threads; answer (seconds, statuses)."""
    statuses: list[int] = []
    lock = threading.Lock()
    chunks = [requests[n::threads] for n in range(threads)]

    def run(chunk) -> None:
        seen = []
        for path, body, headers in chunk:
            response = pool.urlopen(
                "POST", path, body=body, headers=headers, retries=False, redirect=False
            )
            seen.append(response.status)
        with lock:
            statuses.extend(seen)

    workers = [threading.Thread(target=run, args=(chunk,)) for chunk in chunks]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started, statuses


# -- (a) the sender ------------------------------------------------------------


def sender_round(bench_url: str, port: int, events: int, endpoints: list) -> dict:
    import urllib3
    from django.db import connection, transaction

    from django_ultimate_jobs.models import Job, WebhookDelivery
    from django_ultimate_jobs.webhooks import deliver

    total = events * len(endpoints)
    # The bare loop: the same client, the same URLs and bodies, nothing else.
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=THREADS)
    paths = [f"/e/{n}/" for n in range(len(endpoints))]
    plain = [
        (paths[n % len(paths)], BODY.encode(), {"Content-Type": "application/json"})
        for n in range(total)
    ]
    bare_s, statuses = _hammer(pool, plain, THREADS)
    assert statuses.count(200) == total, statuses[:5]
    pool.close()

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE ultimate_jobs_webhook_delivery, ultimate_jobs_job CASCADE"
        )
    for _ in range(events):
        with transaction.atomic():
            deliver("invoice.paid", BODY)
    argv = [
        sys.executable, "-m", "django", "runjobs",
        "--settings", SETTINGS,
        "--concurrency", str(THREADS),
        "--queues", "default",
        "--burst",
    ]  # fmt: skip
    gated = start_behind_gate(
        bench_url, lambda: WorkerProcess(argv, child_env(bench_url), "runjobs "), 1
    )
    (proc,) = gated.procs
    proc.wait(600 + total * 0.01)
    delivered = WebhookDelivery.objects.filter(state="delivered")
    done = delivered.count()
    if done != total or proc.returncode != 0:
        raise RuntimeError(f"{done}/{total} delivered\n{proc.output()}")
    last = max(delivered.values_list("delivered_at", flat=True))
    ours_s = last.timestamp() - gated.started
    assert (
        Job.objects.filter(name="ultimate_jobs.webhook", state="done").count() == total
    )
    return {
        "deliveries": total,
        "ours_per_s": round(total / ours_s),
        "bare_per_s": round(total / bare_s),
        "ratio": round(bare_s / ours_s, 3),
    }


# -- (b) the receiver ----------------------------------------------------------


def receiver_round(port: int, requests: int, round_no: int) -> dict:
    import urllib3

    from bench.webhook_urls import SECRET
    from django_ultimate_jobs.webhooks import sign

    body = BODY.encode()
    stamp = int(time.time())
    signed = []
    for n in range(requests):
        msg_id = f"msg_bench_{round_no}_{n}"
        signed.append(
            (
                "/hooks/in/",
                body,
                {
                    "Content-Type": "application/json",
                    "webhook-id": msg_id,
                    "webhook-timestamp": str(stamp),
                    "webhook-signature": sign(SECRET, msg_id, stamp, body),
                },
            )
        )
    bare = [("/bare/", body, {"Content-Type": "application/json"})] * requests
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=THREADS)
    try:
        bare_s, bare_statuses = _hammer(pool, bare, THREADS)
        ours_s, statuses = _hammer(pool, signed, THREADS)
    finally:
        pool.close()
    assert bare_statuses.count(200) == requests, set(bare_statuses)
    assert statuses.count(200) == requests, set(statuses)
    return {
        "requests": requests,
        "receiver_per_s": round(requests / ours_s),
        "bare_view_per_s": round(requests / bare_s),
        "ratio": round(bare_s / ours_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--endpoints", type=int, default=50)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()
    url = server_url(DB)
    bench_url = recreate_database(url, DB)
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    senders, receivers = [], []
    servers: list[WorkerProcess] = []
    try:
        setup_django(bench_url)
        from django_ultimate_jobs.webhooks import create_endpoint

        env = {**child_env(bench_url), "DJANGO_SETTINGS_MODULE": SETTINGS}
        endpoint_port, django_port = _free_port(), _free_port()
        servers.append(gunicorn("bench.webhook_endpoint:app", endpoint_port, env, 2, 8))
        servers.append(
            gunicorn("django.core.wsgi:get_wsgi_application()", django_port, env, 2, 4)
        )
        endpoints = [
            create_endpoint(f"http://127.0.0.1:{endpoint_port}/e/{n}/", topics=["*"])[0]
            for n in range(args.endpoints)
        ]
        for round_no in range(args.rounds):
            senders.append(
                sender_round(bench_url, endpoint_port, args.events, endpoints)
            )
            receivers.append(receiver_round(django_port, args.requests, round_no))
            print(
                f"round {round_no + 1}: {senders[-1]} {receivers[-1]}", file=sys.stderr
            )
        from django.db import connections

        connections.close_all()
    finally:
        for server in servers:
            server.terminate()
        if not args.keep:
            drop_database(url, DB)

    def summary(rows: list[dict], key: str) -> str:
        values = [row[key] for row in rows]
        return f"{statistics.median(values):,} ({min(values):,}-{max(values):,})"

    print(
        f"sender, {senders[0]['deliveries']:,} deliveries to {args.endpoints} endpoints, "
        f"1 runjobs x {THREADS} threads (target >= 0.5x the bare loop)"
    )
    print(f"  ours      {summary(senders, 'ours_per_s')} deliveries/s")
    print(f"  bare loop {summary(senders, 'bare_per_s')} requests/s")
    print(f"  ratio     {summary(senders, 'ratio')}")
    print(
        f"receiver under gunicorn, {args.requests:,} requests, {THREADS} client threads"
    )
    print(f"  receiver  {summary(receivers, 'receiver_per_s')} verified requests/s")
    print(f"  bare view {summary(receivers, 'bare_view_per_s')} requests/s")
    print(f"  ratio     {summary(receivers, 'ratio')}")
    RESULTS.write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "commit": git_head(),
                "python": platform.python_version(),
                "arguments": vars(args),
                "sender": senders,
                "receiver": receivers,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
