"""Metrics: the shared queue snapshot, the view's protection, runjobs' refusals.

The endpoint of a real ``runjobs`` is scraped in
tests/acceptance/test_metrics.py; here the parts a user relies on besides:
the fleet's snapshot is read once per interval (the ``reads`` column the
reading transaction increments), the view answers only a bearer token or a
staff user with the permission, bad ``--metrics-*`` options are refused
before the worker starts, the Grafana dashboard names only metrics that
exist, and nothing imports prometheus_client unless metrics are turned on.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_ultimate_jobs.metrics import METRICS, PREFIX
from django_ultimate_jobs.metrics.models import MetricsSnapshot
from django_ultimate_jobs.metrics.snapshot import SNAPSHOT_KEY, queue_snapshot
from tests.jobsapp.jobs import noop

REPO = Path(__file__).resolve().parents[1]
TOKEN = "metrics-token-of-the-tests-0123456789"
URL = "/metrics/jobs"  # tests/urls.py


def _reads() -> int:
    return MetricsSnapshot.objects.get(key=SNAPSHOT_KEY).reads


# -- the fleet's snapshot ---------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_queues_are_read_once_per_interval_however_often_scraped():
    """Scrapes within the interval reuse the row; the next interval reads again."""
    noop.enqueue()
    first = queue_snapshot(interval_ms=60_000)
    assert _reads() == 1
    assert first.age_s == 0.0
    for _ in range(5):
        again = queue_snapshot(interval_ms=60_000)
        assert again.queues == first.queues
        assert again.age_s >= 0.0
    assert _reads() == 1
    # The interval has passed (the row is older than it): one more read,
    # which sees the job enqueued since.
    noop.enqueue()
    MetricsSnapshot.objects.filter(key=SNAPSHOT_KEY).update(
        taken_at=timezone.now() - timedelta(minutes=2)
    )
    later = queue_snapshot(interval_ms=60_000)
    assert _reads() == 2
    (default,) = [q for q in later.queues if q["queue"] == "default"]
    assert default["ready"] == 2


# -- the view ----------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_hostile_queue_name_comes_back_whole_through_the_parser():
    """A queue name with quotes, a backslash and braces is escaped by the
    exposition, so it can neither break the format nor forge a sample."""
    hostile = 'q"} ultimate_jobs_workers_alive 99 {\\x'
    noop.using(queue=hostile).enqueue()
    client = Client()
    client.force_login(_staff(perm=True))
    body = client.get(URL).content.decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    ready = {
        s.labels["queue"]: s.value
        for s in families[f"{PREFIX}queue_depth"].samples
        if s.labels["state"] == "ready"
    }
    assert ready[hostile] == 1
    (alive,) = families[f"{PREFIX}workers_alive"].samples
    assert alive.value == 0


def _staff(*, perm: bool, staff: bool = True) -> User:
    user = User.objects.create_user(
        f"u{User.objects.count()}", password="pw", is_staff=staff
    )
    if perm:
        user.user_permissions.add(
            Permission.objects.get(
                codename="view_job", content_type__app_label="ultimate_jobs"
            )
        )
    return user


def _gauges(body: bytes) -> set[str]:
    return {family.name for family in text_string_to_metric_families(body.decode())}


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_view_serves_the_fleet_gauges_to_a_staff_user_with_the_permission():
    noop.enqueue()
    client = Client()
    client.force_login(_staff(perm=True))
    response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    fleet = {m.family for m in METRICS if m.source == "fleet"}
    assert _gauges(response.content) == fleet
    assert 'ultimate_jobs_queue_depth{queue="default",state="ready"} 1.0' in (
        response.content.decode()
    )


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("who", "status"),
    [
        ("anonymous", 401),
        ("staff-without-permission", 403),
        ("permission-without-staff", 403),
        ("inactive", 401),
    ],
)
def test_the_view_refuses_everyone_else(who, status):
    client = Client()
    if who == "staff-without-permission":
        client.force_login(_staff(perm=False))
    elif who == "permission-without-staff":
        client.force_login(_staff(perm=True, staff=False))
    elif who == "inactive":
        user = _staff(perm=True)
        client.force_login(user)
        user.is_active = False
        user.save()
    response = client.get(URL)
    assert response.status_code == status
    assert b"ultimate_jobs_" not in response.content
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer ")


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_view_takes_the_bearer_token_when_one_is_set():
    client = Client()
    with override_settings(ULTIMATE_JOBS={"QUEUES": ["default"]}):
        # No token set: a bearer header is not a way in.
        bearer = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 401
    with override_settings(
        ULTIMATE_JOBS={"QUEUES": ["default"], "METRICS_TOKEN": TOKEN}
    ):
        right = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
        wrong = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}x"})
        basic = client.get(URL, headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert right.status_code == 200
    assert f"{PREFIX}queue_depth" in _gauges(right.content)
    assert wrong.status_code == 403
    assert basic.status_code == 401


def test_a_short_token_is_refused_without_echoing_it():
    from django_ultimate_jobs.conf import parse_settings
    from django_ultimate_jobs.errors import SettingsInvalid

    with pytest.raises(SettingsInvalid) as caught:
        parse_settings({"METRICS_TOKEN": "hunter2"})
    assert "hunter2" not in caught.value.render()
    assert "at least 16 characters" in caught.value.render()


# -- runjobs' options ---------------------------------------------------------------


def _refused(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        call_command("runjobs", "--burst", "--no-scheduler", "--no-wake", *args)
    return str(caught.value)


@pytest.mark.parametrize(
    ("args", "cause"),
    [
        (["--metrics-addr", "0.0.0.0"], "--metrics-addr without --metrics-port"),
        (["--metrics-port", "0"], "--metrics-port must be a TCP port"),
        (["--metrics-port", "70000"], "--metrics-port must be a TCP port"),
        (
            ["--metrics-port", "65535", "--processes", "2"],
            "with --processes 2, up to 65534",
        ),
        (["--metrics-port", "9108", "--metrics-addr", " "], "--metrics-addr is empty"),
        (["--relay-only", "--metrics-port", "9108"], "--relay-only runs no worker"),
    ],
)
def test_bad_metrics_options_are_refused_before_anything_starts(args, cause):
    message = _refused(*args)
    assert message.startswith("X_SETTINGS_INVALID: "), message
    assert cause in message


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_taken_metrics_port_is_a_coded_refusal():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        message = _refused("--metrics-port", str(port))
    assert message.startswith("X_METRICS_SERVE_FAILED: "), message
    assert f"127.0.0.1:{port}" in message


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_taken_port_of_any_child_stops_the_start_before_a_child_runs():
    """``--processes 2``: child 1's port taken, so no child starts at all."""
    for _ in range(50):
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        with socket.socket() as taken:
            try:
                taken.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            taken.listen()
            message = _refused("--metrics-port", str(port), "--processes", "2")
            break
    else:
        raise AssertionError("no port P with P + 1 free in 50 tries")
    assert message.startswith("X_METRICS_SERVE_FAILED: "), message
    assert f"127.0.0.1:{port + 1}" in message


# -- the dashboard and the import cost ----------------------------------------------


def _dashboard_metric_names() -> set[str]:
    dashboard = json.loads((REPO / "docs/grafana/ultimate-jobs.json").read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]
    assert exprs, "the dashboard has no queries"
    return {name for expr in exprs for name in re.findall(r"\bultimate_jobs_\w+", expr)}


def test_the_grafana_dashboard_names_only_metrics_that_exist():
    exposed = set()
    for metric in METRICS:
        exposed.add(metric.name)
        if metric.kind == "histogram":
            exposed |= {f"{metric.name}_{s}" for s in ("bucket", "count", "sum")}
    unknown = _dashboard_metric_names() - exposed
    assert not unknown, (
        f"docs/grafana/ultimate-jobs.json names unknown metrics: {unknown}"
    )


def _alert_exprs() -> list[str]:
    text = (REPO / "docs/howto/monitoring.md").read_text()
    exprs = re.findall(r"^\s+expr: (.+)$", text, re.M)
    assert exprs, "the monitoring how-to has no alert rules"
    return exprs


def test_fleet_gauges_are_aggregated_with_max_or_min_not_summed():
    """Every endpoint serves the same fleet gauges: a sum counts them once per endpoint."""
    fleet = [m.name for m in METRICS if m.source == "fleet"]
    dashboard = json.loads((REPO / "docs/grafana/ultimate-jobs.json").read_text())
    exprs = _alert_exprs() + [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]
    checked = 0
    for expr in exprs:
        for name in fleet:
            for found in re.finditer(rf"\b{name}\b", expr):
                before = expr[: found.start()]
                around = re.search(r"(\w+)(?: by \([^)]*\))?\s*\($", before)
                assert around and around.group(1) in ("max", "min"), (
                    f"{name} is not under max/min in: {expr}"
                )
                checked += 1
    assert checked


@pytest.mark.django_db
def test_the_operator_commands_the_monitoring_howto_names_run():
    """An alert that names a command that does not exist sends the operator nowhere."""
    text = (REPO / "docs/howto/monitoring.md").read_text()
    commands = re.findall(r"manage\.py (jobs [^\"`\n]+)", text)
    assert commands
    for command in commands:
        name, *args = command.split()
        call_command(name, *args)


def test_the_monitoring_howto_lists_every_metric():
    text = (REPO / "docs/howto/monitoring.md").read_text()
    listed = set(re.findall(r"^\| `(ultimate_jobs_\w+)`", text, re.M))
    assert listed == {m.name for m in METRICS}


def test_nothing_imports_prometheus_client_unless_metrics_are_on():
    """A worker, a job run and the app's models load without the client."""
    code = (
        "import sys, django; django.setup();"
        "import django_ultimate_jobs.metrics, django_ultimate_jobs.models;"
        "import django_ultimate_jobs.worker.runner;"
        "import django_ultimate_jobs.management.commands.runjobs;"
        "print('prometheus_client' in sys.modules)"
    )
    answer = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert answer.stdout.strip() == "False", answer.stderr


def test_attempt_durations_land_in_cumulative_le_buckets_with_count_and_sum():
    """A value on a bucket's bound counts in it (``le``); buckets are cumulative."""
    from prometheus_client import CollectorRegistry, generate_latest

    from django_ultimate_jobs.metrics.collect import DURATION_BUCKETS, _Tallies

    tallies = _Tallies()
    registry = CollectorRegistry()
    registry.register(tallies)
    for seconds in (0.005, 0.0051, 1, 400):
        tallies.duration.observe(("shop.charge", "default"), seconds)
    tallies.jobs.inc(("shop.charge", "default", "done"))
    tallies.jobs.inc(("shop.charge", "default", "done"))

    families = {
        family.name: family
        for family in text_string_to_metric_families(generate_latest(registry).decode())
    }
    samples = {
        (sample.name, sample.labels.get("le")): sample.value
        for sample in families[f"{PREFIX}attempt_duration_seconds"].samples
    }
    assert samples[(f"{PREFIX}attempt_duration_seconds_bucket", "0.005")] == 1
    assert samples[(f"{PREFIX}attempt_duration_seconds_bucket", "0.01")] == 2
    assert samples[(f"{PREFIX}attempt_duration_seconds_bucket", "1.0")] == 3
    assert samples[(f"{PREFIX}attempt_duration_seconds_bucket", "300.0")] == 3
    assert samples[(f"{PREFIX}attempt_duration_seconds_bucket", "+Inf")] == 4
    assert samples[(f"{PREFIX}attempt_duration_seconds_count", None)] == 4
    assert samples[(f"{PREFIX}attempt_duration_seconds_sum", None)] == pytest.approx(
        401.0101
    )
    assert len(DURATION_BUCKETS) + 1 == sum(
        1 for name, _ in samples if name.endswith("_bucket")
    )
    (total,) = [
        sample
        for sample in families[f"{PREFIX}jobs"].samples
        if sample.name == f"{PREFIX}jobs_total"
    ]
    assert total.value == 2 and total.labels["outcome"] == "done"


def test_a_settle_that_finds_its_row_retaken_counts_lost_and_is_not_timed(pg_driver):
    """The body ran to its end, but the row was re-taken meanwhile (a process
    stopped past its lease): ``jobs_total{outcome="lost"}``, no duration."""
    from prometheus_client import CollectorRegistry, generate_latest

    from django_ultimate_jobs.metrics.collect import ProcessMetrics
    from django_ultimate_jobs.models import Job
    from django_ultimate_jobs.worker.config import WorkerConfig
    from django_ultimate_jobs.worker.runner import Worker

    worker = Worker(WorkerConfig(queues=("default",)), driver=pg_driver)
    registry = CollectorRegistry()
    metrics = ProcessMetrics(worker, registry)
    metrics.connect()
    job_id = noop.enqueue().id
    claimed, _ = worker.claims.claim(worker.config.claim_batch)
    executions = worker.slots.run_inline(claimed)
    # Another worker re-took the lapsed lease while this one was stopped.
    Job.objects.filter(id=job_id).update(claimed_by="another-worker")
    worker.settler.settle(executions)
    metrics.disconnect()

    samples = {
        (sample.name, sample.labels.get("outcome")): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    assert samples[(f"{PREFIX}jobs_total", "lost")] == 1
    assert (f"{PREFIX}jobs_total", "completed") not in samples
    assert (f"{PREFIX}attempt_duration_seconds_count", None) not in samples
    assert samples[(f"{PREFIX}pickup_latency_seconds_count", None)] == 1
