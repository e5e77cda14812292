"""``runjobs --metrics-port``: scraped during a run, parsed with prometheus_client.

What a user relies on: every metric of the monitoring how-to is on the
endpoint, the counts are what the database says happened, and the queue
gauges cost the database one read of the queues per ``METRICS_INTERVAL``
for the whole fleet, however many workers are scraped at once (counted by
the ``reads`` column the reading transaction itself increments).
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_ultimate_jobs import operator
from django_ultimate_jobs.metrics import METRICS
from django_ultimate_jobs.metrics.models import MetricsSnapshot
from django_ultimate_jobs.metrics.snapshot import SNAPSHOT_KEY
from django_ultimate_jobs.models import Job, Worker
from tests.jobsapp.jobs import always_fail, fail_once, hang, noop, slow
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

START_S = 60
SETTLE_S = 60
OUTAGE_S = 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> {sorted labels: value}, parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples


def _adjacent_free_ports() -> int:
    """A port P such that P and P + 1 are both free on 127.0.0.1 now."""
    for _ in range(50):
        port = _free_port()
        with socket.socket() as one, socket.socket() as two:
            try:
                one.bind(("127.0.0.1", port))
                two.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports in 50 tries")


def _value(samples, metric: str, /, **labels: str) -> float:
    return samples.get(metric, {}).get(tuple(sorted(labels.items())), 0.0)


def _metrics_url(worker) -> str:
    worker.wait_for_output("metrics on http://", START_S)
    line = next(x for x in worker.output().splitlines() if "metrics on " in x)
    return line.split("metrics on ", 1)[1].strip()


def _exposed(samples) -> set[str]:
    names = set()
    for metric in METRICS:
        if metric.kind == "histogram":
            wanted = f"{metric.name}_count"
        else:
            wanted = metric.name
        if wanted in samples:
            names.add(metric.name)
    return names


def test_a_scrape_during_a_run_has_every_metric_and_the_database_counts(fleet):
    """Jobs by outcome, histograms, leases lost and queue gauges match the rows."""
    for _ in range(5):
        noop.enqueue()
    failing = [always_fail.enqueue().id for _ in range(2)]
    fail_once.enqueue()
    later = timezone.now() + timedelta(hours=1)
    for _ in range(3):
        noop.using(run_at=later).enqueue()
    held = slow.enqueue(seconds=60)
    port = _free_port()
    worker = fleet.start(
        "--no-scheduler",
        "--metrics-port",
        str(port),
        env={"UJ_METRICS_INTERVAL": "100ms"},
    )
    url = _metrics_url(worker)
    assert url == f"http://127.0.0.1:{port}/metrics"

    # A held job cancelled by an operator: its lease is lost (jobs.lease.lost).
    wait_until(lambda: operator.job_state(held.id) == "running", SETTLE_S)
    operator.cancel(held.id)

    def settled():
        states = Job.objects.values_list("state", flat=True)
        return sorted(states).count("done") == 6 and list(states).count("dead") == 2

    wait_until(settled, SETTLE_S, message=fleet.logs)

    def scraped_as_the_database_says():
        samples = _scrape(url)
        stats = {q["queue"]: q for q in operator.stats()["queues"]}
        default = stats["default"]
        depth_ok = all(
            _value(samples, "ultimate_jobs_queue_depth", queue="default", state=s)
            == default[s]
            for s in ("ready", "delayed", "running", "suspended", "failed", "dead")
        )
        lost = _value(samples, "ultimate_jobs_job_leases_lost_total")
        busy = _value(samples, "ultimate_jobs_worker_slots_busy")
        return samples if depth_ok and lost == 1 and busy == 0 else None

    samples = wait_until(scraped_as_the_database_says, SETTLE_S, message=fleet.logs)

    assert _exposed(samples) == {m.name for m in METRICS}
    jobs = "ultimate_jobs_jobs_total"
    done_noops = Job.objects.filter(name="tests.noop", state="done").count()
    assert done_noops == 5
    assert (
        _value(samples, jobs, name="tests.noop", queue="default", outcome="completed")
        == done_noops
    )
    dead = Job.objects.filter(id__in=failing, state="dead").count()
    assert dead == 2
    assert (
        _value(
            samples,
            jobs,
            name="tests.always_fail",
            queue="default",
            outcome="dead-lettered",
        )
        == dead
    )
    # Each dead job's first attempt was retried; fail_once's too.
    assert _value(
        samples, jobs, name="tests.always_fail", queue="default", outcome="retried"
    ) == sum(j.attempt - 1 for j in Job.objects.filter(id__in=failing))
    assert (
        _value(
            samples, jobs, name="tests.fail_once", queue="default", outcome="retried"
        )
        == 1
    )
    assert (
        _value(
            samples, jobs, name="tests.fail_once", queue="default", outcome="completed"
        )
        == 1
    )
    # Every attempt that ran was timed and its pickup measured.
    attempts = sum(
        value
        for labels, value in samples[jobs].items()
        if dict(labels)["outcome"] not in ("lost", "interrupted", "refused")
    )
    durations = sum(samples["ultimate_jobs_attempt_duration_seconds_count"].values())
    assert durations == attempts
    pickups = sum(samples["ultimate_jobs_pickup_latency_seconds_count"].values())
    assert pickups == attempts + 1  # and the slow job, whose attempt was lost
    dead_gauge = _value(samples, "ultimate_jobs_queue_dead_jobs", queue="default")
    assert dead_gauge == operator.count(states="dead", queue="default") == 2
    assert (
        _value(samples, "ultimate_jobs_queue_depth", queue="default", state="delayed")
        == 3
    )
    assert _value(samples, "ultimate_jobs_workers_alive") == len(operator.workers())
    assert _value(samples, "ultimate_jobs_worker_slots") == 8
    assert _value(samples, "ultimate_jobs_worker_slots_busy") == 0
    assert _value(samples, "ultimate_jobs_database_up") == 1
    assert _value(samples, "ultimate_jobs_database_outages_total") == 0

    # The worker's console (ConsoleFormatter, tests/acceptance/worker_settings.py)
    # names each failed attempt's job, run, attempt, queue, code and error.
    first_id = failing[0]
    run_id = Job.objects.get(id=first_id).run_id
    assert (
        f"jobs.attempt.failed job=tests.always_fail job_id={first_id} "
        f"run_id={run_id} attempt=2 queue=default outcome=dead-lettered "
        'code=X_APP_BROKEN error="AppBroken: the gateway said no" '
        "stop=attempts-exhausted"
    ) in worker.output()


def test_ten_scrapers_at_once_cost_one_read_of_the_queues_per_interval(fleet):
    """Three workers scraped by ten clients at once: one queue read per interval."""
    for _ in range(3):
        noop.using(run_at=timezone.now() + timedelta(hours=1)).enqueue()
    urls = []
    workers = [
        fleet.start(
            "--no-scheduler",
            "--metrics-port",
            str(_free_port()),
            env={"UJ_METRICS_INTERVAL": "30s"},
        )
        for _ in range(3)
    ]
    urls = [_metrics_url(worker) for worker in workers]

    def burst() -> list[float]:
        barrier = threading.Barrier(10)
        seen: list[float] = []

        def one(index: int) -> None:
            barrier.wait()
            samples = _scrape(urls[index % len(urls)])
            seen.append(
                _value(
                    samples,
                    "ultimate_jobs_queue_depth",
                    queue="default",
                    state="delayed",
                )
            )

        threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        return seen

    def reads() -> int:
        return MetricsSnapshot.objects.get(key=SNAPSHOT_KEY).reads

    # The scrapes of the workers' start may have made the row: make it stale.
    MetricsSnapshot.objects.update_or_create(
        key=SNAPSHOT_KEY,
        defaults={"taken_at": timezone.now() - timedelta(hours=1)},
    )
    before = reads()
    started = time.monotonic()
    first = burst()
    second = burst()
    elapsed = time.monotonic() - started
    assert first == [3.0] * 10, first
    assert second == [3.0] * 10, second
    # Twenty scrapes of three workers in well under one interval: one read.
    assert elapsed < 30, elapsed
    assert reads() - before == 1


def test_with_processes_each_child_serves_on_its_own_port(fleet):
    """``--processes 2 --metrics-port P``: children answer on P and P + 1."""
    port = _adjacent_free_ports()
    fleet.start("--processes", "2", "--metrics-port", str(port))

    def both_answer():
        try:
            return [
                _scrape(f"http://127.0.0.1:{p}/metrics")["ultimate_jobs_worker_slots"]
                for p in (port, port + 1)
            ]
        except OSError:
            return None

    assert wait_until(both_answer, START_S, message=fleet.logs) == [{(): 8.0}] * 2


@pytest.mark.django_db(transaction=True)
def test_a_database_outage_shows_on_the_endpoint_and_is_counted(proxied_fleet):
    """database_up is 0 during an outage (answered at once, no queue gauges);
    after it, 1, with the outage counted once, as jobs.db.lost logged it."""
    fleet, proxy = proxied_fleet
    worker = fleet.start(
        "--no-scheduler",
        "--metrics-port",
        str(_free_port()),
    )
    url = _metrics_url(worker)
    before = _scrape(url)
    assert _value(before, "ultimate_jobs_database_up") == 1
    assert "ultimate_jobs_workers_alive" in before  # the fleet gauges
    proxy.cut()
    try:
        worker.wait_for_output("jobs.db.lost", OUTAGE_S)
        started = time.monotonic()
        during = _scrape(url)
        assert time.monotonic() - started < 2
        assert _value(during, "ultimate_jobs_database_up") == 0
        assert "ultimate_jobs_workers_alive" not in during
    finally:
        proxy.restore()
    worker.wait_for_output("jobs.db.recovered", OUTAGE_S)

    def back():
        samples = _scrape(url)
        return samples if "ultimate_jobs_workers_alive" in samples else None

    after = wait_until(back, OUTAGE_S, message=fleet.logs)
    assert _value(after, "ultimate_jobs_database_up") == 1
    assert _value(after, "ultimate_jobs_database_outages_total") == 1
    assert worker.output().count("jobs.db.lost") == 1


def test_a_held_job_that_ignores_its_cancellation_loses_its_lease_once(fleet, tmp_path):
    """One lost lease: one ``jobs.lease.lost`` line and a count of one, however
    many heartbeats pass while the body still runs."""
    flag = tmp_path / "hold"
    flag.touch()
    held = hang.enqueue(flag=str(flag))
    worker = fleet.start(
        "--no-scheduler",
        "--metrics-port",
        str(_free_port()),
        env={"UJ_METRICS_INTERVAL": "100ms", "UJ_HEARTBEAT": "100ms"},
    )
    url = _metrics_url(worker)
    wait_until(lambda: operator.job_state(held.id) == "running", SETTLE_S)
    operator.cancel(held.id)
    worker.wait_for_output("jobs.lease.lost", SETTLE_S)
    seen = Worker.objects.get().heartbeat_at

    def ten_heartbeats_later() -> bool:
        return Worker.objects.get().heartbeat_at >= seen + timedelta(seconds=1)

    wait_until(ten_heartbeats_later, SETTLE_S, message=fleet.logs)
    samples = _scrape(url)
    assert worker.output().count("jobs.lease.lost") == 1
    assert _value(samples, "ultimate_jobs_job_leases_lost_total") == 1
    flag.unlink()
