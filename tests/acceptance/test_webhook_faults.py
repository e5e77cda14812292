"""Webhook deliveries across crashes, with real ``runjobs`` processes.

The endpoint is the test URLconf's receiver in its own process
(tests/acceptance/webhook_endpoint.py), so the receiver's dedupe on
``webhook-id`` is the real one; the workers run the faults webhook of
tests/jobsapp/jobs.py (short retries, never disabled). Judged by the
tables: the job rows, the delivery rows, and the receiver's
``InboundDelivery`` rows.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from django_ultimate_jobs.models import InboundDelivery, Job, WebhookDelivery
from django_ultimate_jobs.webhooks import create_endpoint
from tests.jobsapp.jobs import faults_webhook
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProcess
from tests.urls import RECEIVER_SECRET

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WAIT_S = 60.0
LOOPBACK = {"UJ_WEBHOOK_LOOPBACK": "1"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Endpoint:
    """The receiver's process: started, killed and started again on one port."""

    def __init__(self, fleet, env, tmp_path: Path, hold: Path | None = None):
        self.fleet, self.env, self.tmp_path, self.hold = fleet, env, tmp_path, hold
        self.port = _free_port()
        self.log = tmp_path / "endpoint-requests.jsonl"
        self.runs = 0
        self.process: WorkerProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/in/"

    def start(self) -> None:
        self.runs += 1
        argv = [
            sys.executable,
            "-m",
            "tests.acceptance.webhook_endpoint",
            str(self.port),
            str(self.log),
        ]
        if self.hold is not None:
            argv.append(str(self.hold))
        self.process = WorkerProcess(
            f"endpoint-{self.runs}",
            argv,
            self.env,
            self.tmp_path / f"endpoint-{self.runs}.log",
        )
        self.fleet.processes.append(self.process)
        self.process.wait_for_output("listening on", WAIT_S)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()

    def requests(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


def _received(msg_id: str):
    def received() -> bool:
        return InboundDelivery.objects.filter(webhook_id=msg_id).exists()

    received.__name__ = f"receiver_committed_{msg_id}"
    return received


@pytest.fixture(autouse=True)
def _loopback(settings):
    """This process makes the endpoint rows: http to 127.0.0.1 is allowed."""
    settings.ULTIMATE_JOBS = {
        "QUEUES": ["default"],
        "WEBHOOK_ALLOW_NETWORKS": ["127.0.0.0/8"],
        "WEBHOOK_ALLOW_HTTP": True,
    }


def test_a_worker_killed_mid_delivery_is_retried_and_deduped_by_the_receiver(
    fleet, worker_env, tmp_path
):
    hold = tmp_path / "hold"
    hold.write_text("hold")
    endpoint = Endpoint(fleet, worker_env, tmp_path, hold=hold)
    endpoint.start()
    create_endpoint(endpoint.url, topics=["*"], secret=RECEIVER_SECRET)
    (delivery,) = faults_webhook.deliver("order.paid", '{"order": 1}')

    first = fleet.start(env=LOOPBACK, name="first")
    # The receiver committed the delivery; its answer is held back, so the
    # worker is waiting on the socket when it dies.
    wait_until(_received(delivery.msg_id), WAIT_S, message=fleet.logs)
    first.kill()
    job = Job.objects.get(id=delivery.job_id)
    assert (job.state, job.attempt) == ("running", 1)
    assert WebhookDelivery.objects.get(pk=delivery.pk).attempts == 0

    hold.unlink()
    fleet.start(env=LOOPBACK, name="second")
    wait_until(
        lambda: Job.objects.get(id=delivery.job_id).state == "done",
        WAIT_S,
        message=fleet.logs,
    )
    job = Job.objects.get(id=delivery.job_id)
    assert (job.state, job.attempt, job.claims) == ("done", 2, 2)
    row = WebhookDelivery.objects.get(pk=delivery.pk)
    assert (row.attempts, row.last_status) == (1, 200)  # the killed one never recorded
    # Sent twice under one webhook-id; the receiver ran it once.
    requests = endpoint.requests()
    assert [r["id"] for r in requests] == [delivery.msg_id] * 2
    assert [json.loads(r["answer"])["status"] for r in requests] == [
        "accepted",
        "duplicate",
    ]
    assert InboundDelivery.objects.filter(webhook_id=delivery.msg_id).count() == 1


def test_the_endpoint_killed_and_restarted_mid_stream_loses_nothing(
    fleet, worker_env, tmp_path
):
    endpoint = Endpoint(fleet, worker_env, tmp_path)
    endpoint.start()
    create_endpoint(endpoint.url, topics=["*"], secret=RECEIVER_SECRET)
    deliveries = [faults_webhook.deliver("tick", f'{{"n": {n}}}')[0] for n in range(40)]
    ids = {d.msg_id for d in deliveries}

    fleet.start("--concurrency", "4", env=LOOPBACK, name="worker")
    wait_until(lambda: InboundDelivery.objects.count() >= 5, WAIT_S, message=fleet.logs)
    endpoint.kill()

    def failed_while_down() -> bool:
        return WebhookDelivery.objects.filter(attempts__gt=0, last_status=None).exists()

    wait_until(failed_while_down, WAIT_S, message=fleet.logs)
    endpoint.start()
    jobs = Job.objects.filter(name="tests.webhook.faults")
    wait_until(
        lambda: jobs.filter(state="done").count() == len(ids),
        WAIT_S,
        message=lambda: f"{fleet.logs()}\n{endpoint.process.tail()}",
    )
    assert set(InboundDelivery.objects.values_list("webhook_id", flat=True)) == ids
    assert InboundDelivery.objects.count() == len(ids)  # each id taken once
    retried = WebhookDelivery.objects.filter(attempts__gt=1)
    assert retried.exists()
    assert not WebhookDelivery.objects.exclude(state="delivered").exists()
    assert set(
        Job.objects.filter(name="tests.webhook.faults").values_list("state", flat=True)
    ) == {"done"}
