"""Where a pickup's time goes: commit -> NOTIFY -> wake -> claim -> slot -> handler.

The pickup row of ``bench/throughput.py`` measures handler start minus the
enqueue's commit return, and splits it only at the claim statement's
``now()``. This bench runs the same workload (an idle worker, ``bench.latency``
jobs enqueued one by one in autocommit, 20 ms apart, as there) with both systems
(``runjobs --concurrency 8`` and ``bench/baseline.py --listen``) started
through a wrapper that records ``time.time()`` at each step of the path in
the worker process, by wrapping functions from outside (the worker's code
is not changed, nothing is recorded in a worker run any other way)::

    BENCH_SPLIT_ROUNDS=3 ./dev run python bench/pickup_split.py

Steps (both systems where they exist):

- ``notify``: the listener thread hands the NOTIFY on (ours: ``wake_hub.notify``;
  raw: ``Event.set``);
- ``woke``: the claiming thread returns from its wait;
- ``send``: the claim statement's ``Cursor.execute`` is entered;
- ``now``: the claim statement's ``now()`` (``claimed_at``, the server);
- ``back``: ``Cursor.execute`` returned (the rows are on the client);
- ``slot``: ours only: a slot thread took the chunk off the queue;
- ``handler``: the handler's ``time.time()`` (``bench_latency``).

For each segment between two steps it prints its p50, p90 and p99 over the
pickups where both steps were recorded (``n``), and for the slowest 2% of
pickups what ran in the worker process meanwhile (collections, other
claims, the keeper's ticks, settles). With ``BENCH_SPLIT_CALLS=1`` it
prints the calls per segment and no times (the call counter slows every
call). bench/README.md says which printed rows make up its table. The bench
database is ``ultimate_jobs_bench_split`` (behind ``BENCH_DB_PREFIX``, kept).
"""

from __future__ import annotations

import atexit
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DB_NAME = "ultimate_jobs_bench_split"
ROUNDS = int(os.environ.get("BENCH_SPLIT_ROUNDS", "3"))
JOBS = int(os.environ.get("BENCH_SPLIT_JOBS", "200"))
TRACE_ENV = "BENCH_SPLIT_TRACE"

# -- the worker side: wrappers that record (step, time, thread) ---------------

_events: list[tuple[str, float, str, float]] = []


_calls = threading.local()
COUNT_CALLS = os.environ.get("BENCH_SPLIT_CALLS") == "1"
"""Instead of CPU time, count each thread's function calls (Python and C)."""


def _record(step: str) -> None:
    # The thread's CPU time too: wall minus CPU between two steps of one
    # thread is time it waited (for the GIL, a core, the network).
    used = getattr(_calls, "n", 0) if COUNT_CALLS else time.thread_time()
    _events.append((step, time.time(), threading.current_thread().name, used))


def _count(frame, event, arg):  # type: ignore[no-untyped-def]
    if event in ("call", "c_call"):
        _calls.n = getattr(_calls, "n", 0) + 1


def _dump() -> None:
    Path(os.environ[TRACE_ENV]).write_text(json.dumps(_events))


def _trace_common() -> None:
    """Wrap what both systems share: the claim's execute and the collector."""
    import gc

    import psycopg

    execute = psycopg.Cursor.execute

    def traced_execute(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        text = query if isinstance(query, str) else ""
        claim = "SKIP LOCKED" in text
        if claim:
            _record("send")
        try:
            return execute(self, query, params, **kwargs)
        finally:
            _record("back" if claim else "other-sql")

    psycopg.Cursor.execute = traced_execute  # type: ignore[method-assign]

    wait = psycopg.Connection.wait

    def traced_wait(self, gen, *args, **kwargs):  # type: ignore[no-untyped-def]
        # Only the LISTEN connections' waits (their threads do nothing else).
        listening = "listen" in threading.current_thread().name
        if listening:
            _record("listen-wait")
        try:
            return wait(self, gen, *args, **kwargs)
        finally:
            if listening:
                _record("listen-ready")

    psycopg.Connection.wait = traced_wait  # type: ignore[method-assign]

    def on_gc(phase: str, info: dict) -> None:
        _record(f"gc-{phase}-{info.get('generation')}")

    gc.callbacks.append(on_gc)
    atexit.register(_dump)
    if COUNT_CALLS:
        threading.setprofile_all_threads(_count)
        sys.setprofile(_count)


class _TracedEvent(threading.Event):
    """An Event whose set() and successful wait() are recorded."""

    set_step = "set"
    wait_step = "woke"

    def set(self) -> None:
        _record(self.set_step)
        super().set()

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        if woke:
            _record(self.wait_step)
        return woke


class _TracedWake:
    """The worker's own wake (whatever its type), its set() and wake-ups recorded."""

    def __init__(self, wake: Any) -> None:
        self._inner = wake
        self.is_set = wake.is_set
        self.clear = wake.clear

    def set(self) -> None:
        _record("wake-set")
        self._inner.set()

    def wait(self, timeout: float | None = None) -> bool:
        woke = self._inner.wait(timeout)
        if woke:
            _record("woke")
        return woke


def child_ours(argv: list[str]) -> None:
    """runjobs, wrapped."""
    _trace_common()
    os.environ["DJANGO_SETTINGS_MODULE"] = argv[argv.index("--settings") + 1]
    import django

    django.setup()
    from django_ultimate_jobs.wake import wake_hub
    from django_ultimate_jobs.worker import claimloop, held, keeper, slots, wakeflag

    notify = wake_hub.notify

    def traced_notify(queue: str = "") -> None:
        _record("notify")
        notify(queue)

    wake_hub.notify = traced_notify  # type: ignore[method-assign]

    init = wakeflag.ClaimWake.__init__

    def traced_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        self.flag = _TracedWake(self.flag)

    wakeflag.ClaimWake.__init__ = traced_init  # type: ignore[method-assign]

    from django_ultimate_jobs.drivers.sessions import DjangoConnectivity

    drop = DjangoConnectivity.drop_dead

    def traced_drop(self) -> None:  # type: ignore[no-untyped-def]  # the slot's first call after its queue get
        _record("slot")
        drop(self)

    DjangoConnectivity.drop_dead = traced_drop  # type: ignore[method-assign]

    from django_ultimate_jobs.drivers.postgres import PostgresDriver

    # (owner, method, the step's name in the trace)
    wrapped = [
        (keeper.Keeper, "fire_deadlines", "_fire_deadlines"),
        (held.HeldAttempts, "settled", "_settled"),
        (slots.SlotPool, "dispatch", "_dispatch"),
        (claimloop.ClaimLoop, "claim", "_claim"),
        (PostgresDriver, "claim", "claim"),
    ]
    for owner, name, step in wrapped:
        original = getattr(owner, name)

        def traced(self, *args, _original=original, _name=step, **kwargs):  # type: ignore[no-untyped-def]
            _record(_name)
            try:
                return _original(self, *args, **kwargs)
            finally:
                _record(_name + "-out")

        setattr(owner, name, traced)

    run_attempt = slots.run_attempt

    def traced_run_attempt(*args, **kwargs):  # type: ignore[no-untyped-def]
        _record("run_attempt")
        return run_attempt(*args, **kwargs)

    slots.run_attempt = traced_run_attempt

    from django.core.management import execute_from_command_line

    execute_from_command_line(["django", "runjobs", *argv])


def child_raw(argv: list[str]) -> None:
    """bench/baseline.py --listen, wrapped."""
    _trace_common()
    import types

    import bench.baseline as baseline

    shim = types.SimpleNamespace(**vars(threading))
    shim.Event = _TracedEvent
    baseline.threading = shim  # type: ignore[assignment]
    _TracedEvent.set_step = "notify"  # the listener thread's only set() but SIGTERM's
    baseline.main(argv)


# -- the bench side -----------------------------------------------------------


def run_round(system: str, bench_url: str) -> list[dict]:
    from bench import throughput as tp
    from bench.common import WorkerProcess, child_env
    from django_ultimate_jobs.registry import get_job

    handle = get_job("bench.latency")
    tp.reset_tables()
    trace = Path(tempfile.mkstemp(prefix="pickup-split-", suffix=".json")[1])
    env = {TRACE_ENV: str(trace)}
    if system == tp.OURS:
        argv = [
            sys.executable,
            __file__,
            "--child-ours",
            "--settings",
            tp.SETTINGS,
            "--concurrency",
            str(tp.THREADS),
            "--queues",
            "default",
        ]
        proc = WorkerProcess(argv, {**child_env(bench_url), **env}, "runjobs ")
    else:
        argv = [sys.executable, __file__, "--child-raw", "--listen"]  # URL: in env
        proc = WorkerProcess(argv, {**child_env(bench_url), **env}, "baseline ready")
    try:
        committed = tp.drive_pickups(proc, handle, JOBS)
    finally:
        proc.terminate()
    events = json.loads(trace.read_text())
    trace.unlink()
    rows = tp.execute(
        "SELECT l.job_id, l.started, extract(epoch FROM j.claimed_at) "
        "FROM bench_latency l JOIN ultimate_jobs_job j ON j.id = l.job_id"
    )
    return [
        split_one(committed[str(job_id)], float(claimed), started, events)
        for job_id, started, claimed in rows
    ]


def _last(events: list, step: str, before: float, after: float) -> float | None:
    found = [t for s, t, *_ in events if s == step and after <= t <= before]
    return max(found) if found else None


def _first(events: list, step: str, after: float, before: float) -> float | None:
    found = [t for s, t, *_ in events if s == step and after <= t <= before]
    return min(found) if found else None


_OTHER_WORK = (
    "send",
    "back",
    "other-sql",
    "_fire_deadlines",
    "_settled",
    "listen-wait",
    "listen-ready",
)


def split_one(commit: float, now: float, handler: float, events: list) -> dict:
    """One pickup's steps, from the worker's events around it."""
    window = [e for e in events if commit - 0.01 <= e[1] <= handler + 0.001]
    sends = [t for s, t, *_ in window if s == "send" and t <= now + 0.0002]
    send = max(sends) if sends else None
    back = _first(window, "back", now - 0.0002, handler)
    fine = {}
    if send is not None and back is not None:
        fine = {
            "_claim": _last(window, "_claim", send, send - 0.05),
            "claim": _last(window, "claim", send, send - 0.05),
            "claim-out": _first(window, "claim-out", back, handler),
            "_claim-out": _first(window, "_claim-out", back, handler),
            "_dispatch": _first(window, "_dispatch", back, handler),
            "_dispatch-out": _first(window, "_dispatch-out", back, handler),
        }
    steps = {
        **fine,
        "commit": commit,
        "notify": _last(window, "notify", send or now, commit - 0.01),
        "woke": _last(window, "woke", send or now, commit - 0.01),
        "send": send,
        "now": now,
        "back": back,
        "slot": _first(window, "slot", back or now, handler),
        "run_attempt": _first(window, "run_attempt", back or now, handler),
        "handler": handler,
    }
    during = sorted(
        {
            f"{s}@{th}+{(t - commit) * 1000:.1f}"
            for s, t, th, _cpu in window
            if commit <= t <= handler
            and (s in _OTHER_WORK or s.startswith("gc-"))
            and not (s in ("send", "back") and t in (send, back))
        }
    )
    where = {(s, t): (th, cpu) for s, t, th, cpu in window}
    cpu = {}
    for step, at in steps.items():
        for (s, t), value in where.items():
            if t == at and s in (step, "woke") and step != "handler":
                cpu[step] = value
    return {"steps": steps, "during": during, "cpu": cpu}


SEGMENTS = [
    ("commit", "notify", "commit return -> listener hands the NOTIFY on"),
    ("notify", "woke", "-> claiming thread woken"),
    ("woke", "_claim", "-> ClaimLoop.claim entered"),
    ("_claim", "claim", "-> driver.claim entered"),
    ("claim", "send", "-> claim execute() entered"),
    ("woke", "send", "woke -> claim execute() entered"),
    ("commit", "send", "commit -> claim execute() entered"),
    ("send", "back", "claim execute(): the round trip"),
    ("send", "now", "-> claim statement's now() (server)"),
    ("now", "back", "-> claim rows back on the client"),
    ("back", "claim-out", "-> rows decoded, driver.claim returned"),
    ("claim-out", "_claim-out", "-> attempts built, ClaimLoop.claim returned"),
    ("_claim-out", "_dispatch", "-> SlotPool.dispatch entered"),
    ("_dispatch", "_dispatch-out", "-> SlotPool.dispatch returned"),
    ("_dispatch-out", "slot", "-> a slot thread has the chunk"),
    ("back", "slot", "claim back -> a slot thread has the chunk"),
    ("slot", "run_attempt", "-> run_attempt entered"),
    ("run_attempt", "handler", "-> handler start"),
    ("back", "handler", "claim back -> handler start"),
    ("commit", "handler", "total: commit return -> handler start"),
]


def report(system: str, pickups: list[dict]) -> dict:
    out: dict[str, dict] = {}
    print(f"\n{system}: {len(pickups)} pickups")
    if COUNT_CALLS:
        print(
            "  (BENCH_SPLIT_CALLS=1: every call is counted under a profiler, which"
            " slows it: no times are shown, they would mean nothing)"
        )
    width = max(len(f"{a}->{b}: {label}") for a, b, label in SEGMENTS)
    times = "" if COUNT_CALLS else f" {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}"
    last = "calls p50" if COUNT_CALLS else "CPU p50"
    print(f"  {'segment':{width}}{times} {'n':>5} {last:>9}")
    for a, b, label in SEGMENTS:
        values = sorted(
            (p["steps"][b] - p["steps"][a]) * 1000
            for p in pickups
            if p["steps"].get(a) is not None and p["steps"].get(b) is not None
        )
        if len(values) < 10:
            continue
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        cpus = [
            (p["cpu"][b][1] - p["cpu"][a][1]) * 1000
            for p in pickups
            if a in p["cpu"] and b in p["cpu"] and p["cpu"][a][0] == p["cpu"][b][0]
        ]
        cpu = ""
        if len(cpus) >= 10:
            median = statistics.median(cpus)
            cpu = f"{median / 1000:9.0f}" if COUNT_CALLS else f"{median:9.3f}"
        out[f"{a}->{b}"] = {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}
        if not COUNT_CALLS:
            times = f" {cuts[49]:8.3f} {cuts[89]:8.3f} {cuts[98]:8.3f}"
        print(f"  {a + '->' + b + ': ' + label:{width}}{times} {len(values):5} {cpu}")
    if COUNT_CALLS:
        return out
    slow = sorted(pickups, key=lambda p: p["steps"]["handler"] - p["steps"]["commit"])
    tail = slow[-max(1, len(slow) // 50) :]
    print("  slowest 2%: segment ms; what else ran in the worker meanwhile")
    for p in tail:
        s = p["steps"]
        parts = []
        for a, b in (
            ("commit", "notify"),
            ("notify", "woke"),
            ("woke", "send"),
            ("send", "now"),
            ("now", "back"),
            ("back", "slot"),
            ("slot", "handler"),
        ):
            if s[a] is not None and s[b] is not None:
                parts.append(f"{b} {(s[b] - s[a]) * 1000:.2f}")
        total = (s["handler"] - s["commit"]) * 1000
        print(f"    {total:6.2f}: {', '.join(parts)}; {', '.join(p['during']) or '-'}")
    return out


def main() -> None:
    from bench import throughput as tp
    from bench.common import (
        bench_db_name,
        hold_bench_lock,
        recreate_database,
        server_url,
        with_database,
    )

    bench_db = bench_db_name(BENCH_DB_NAME)
    base_url = server_url(bench_db)
    bench_url = with_database(base_url, bench_db)
    lock = hold_bench_lock(base_url, bench_db)  # noqa: F841 (held until exit)
    recreate_database(base_url, bench_db)
    tp.setup_django(bench_url)
    every: dict[str, list[dict]] = {tp.RAW: [], tp.OURS: []}
    for index in range(ROUNDS):
        for system in (tp.RAW, tp.OURS):
            load = os.getloadavg()[0]
            pickups = run_round(system, bench_url)
            totals = sorted(
                (p["steps"]["handler"] - p["steps"]["commit"]) * 1000 for p in pickups
            )
            p50 = "" if COUNT_CALLS else f" p50 {statistics.median(totals):.2f} ms"
            print(
                f"round {index + 1}/{ROUNDS} {system:14} load {load:.2f}{p50}",
                file=sys.stderr,
                flush=True,
            )
            every[system].extend(pickups)
    for system, pickups in every.items():
        report(system, pickups)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-ours":
        child_ours(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-raw":
        child_raw(sys.argv[2:])
    else:
        main()
