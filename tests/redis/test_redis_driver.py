"""What only the Redis driver does: its settings, its refusals, its outbox
routing, its wake and its claims over several queues (a real Redis)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import transaction

from django_ultimate_jobs.drivers import get_driver
from django_ultimate_jobs.drivers.base import ClaimOptions, EnqueueRequest
from django_ultimate_jobs.drivers.redis import RedisDriver
from django_ultimate_jobs.errors import JobsError, SettingsInvalid
from django_ultimate_jobs.models import OutboxMessage
from django_ultimate_jobs.testing import publish_outbox, run_jobs
from django_ultimate_jobs.wake import split_hint
from tests.jobsapp.jobs import atomic_steps, noop
from tests.support.redis import own_redis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis


def test_the_package_imports_without_the_client_and_refuses_with_the_extra():
    """No ``redis`` installed: importing the driver works; building it is
    X_REDIS_CLIENT_MISSING, naming the extra."""
    script = (
        "import sys; sys.modules['redis'] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=[])\n"
        "django.setup()\n"
        "from django_ultimate_jobs.drivers.redis import RedisDriver\n"
        "try:\n"
        "    RedisDriver('redis://127.0.0.1:1/0')\n"
        "except Exception as error:\n"
        "    print(error.code, error.meta['extra'], error.fix)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["X_REDIS_CLIENT_MISSING", "redis"]
    assert "django-ultimate-jobs[redis]" in done.stdout


def test_the_alias_and_its_settings_build_the_driver(settings, redis_url, prefix):
    settings.ULTIMATE_JOBS = {
        "DRIVER": "redis",
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": prefix,
    }
    driver = get_driver()
    assert type(driver) is RedisDriver and driver.store.layout.prefix == prefix
    enqueued = driver.enqueue(EnqueueRequest(name="redis.alias", input={"n": 1}))
    assert driver.get(enqueued.id).input == {"n": 1}
    driver.close()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("REDIS_URL", "http://localhost"),
        ("REDIS_URL", 6379),
        ("REDIS_URL", "redis://localhost:99999/0"),
        ("REDIS_URL", "redis://localhost:0"),
        ("REDIS_URL", "redis://localhost:port/0"),
        ("REDIS_URL", "redis://localhost:6379/zero"),
        ("REDIS_URL", "redis://:6379/0"),
        ("REDIS_URL", "unix://"),
        ("REDIS_URL", "redis://localhost:6379?db=x"),
        ("REDIS_URL", "redis://localhost:6379/0?socket_timeout=abc"),
        ("REDIS_URL", "redis://localhost/7?db=8"),
        ("REDIS_URL", "redis://[::1:6379/0"),
        ("REDIS_PREFIX", "a{b}"),
        ("REDIS_SENTINELS", "10.0.0.1:26379"),
        ("REDIS_SENTINELS", []),
        ("REDIS_SENTINELS", ["10.0.0.1"]),
        ("REDIS_SENTINELS", ["10.0.0.1:99999"]),
        ("REDIS_SENTINEL_SERVICE", ""),
        ("REDIS_WAIT_REPLICAS", -1),
        ("REDIS_WAIT_REPLICAS", True),
        ("REDIS_WAIT_REPLICAS", "1"),
        ("REDIS_WAIT_TIMEOUT", 0),
        ("REDIS_WAIT_TIMEOUT", "soon"),
    ],
)
def test_bad_settings_are_refused_with_a_code(settings, key, value):
    settings.ULTIMATE_JOBS = {"DRIVER": "redis", key: value}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.code == "X_SETTINGS_INVALID" and key in refused.value.cause


@pytest.mark.parametrize(
    ("url", "quoted"),
    [
        (
            "redis://app:s3cret@localhost:70000/0?password=s3cret",
            "'redis://***@localhost:70000/0'",
        ),
        ("redis://app:s3cret@[::1:6379/7", "'redis://***@[::1:6379/7'"),
        ("unix://:s3cret@[/tmp/x.sock", "'unix://***@[/tmp/x.sock'"),
        ("redis://localhost:6379/0?db=x&password=s3cret", "'redis://localhost:6379/0'"),
    ],
)
def test_a_refused_url_is_quoted_without_its_password(settings, url, quoted):
    settings.ULTIMATE_JOBS = {"DRIVER": "redis", "REDIS_URL": url}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert "s3cret" not in refused.value.render()
    assert quoted in refused.value.cause


def test_a_unix_socket_url_reaches_redis(settings, tmp_path, prefix):
    """``unix://`` is a documented form: jobs go in and come out through it."""
    socket_path = tmp_path / "redis.sock"
    with own_redis("--unixsocket", str(socket_path), "--unixsocketperm", "700"):
        settings.ULTIMATE_JOBS = {
            "DRIVER": "redis",
            "REDIS_URL": f"unix://{socket_path}?db=3",
            "REDIS_PREFIX": prefix,
        }
        driver = get_driver()
        try:
            enqueued = driver.enqueue(EnqueueRequest(name="redis.unix", input={"n": 1}))
            (claimed,) = driver.claim(
                ClaimOptions(
                    queues=["default"], limit=1, worker_id="w-u", visibility_ms=30_000
                )
            ).claimed
            assert claimed.id == enqueued.id
        finally:
            driver.close()


def test_sentinels_without_a_service_name_are_refused_with_a_code(settings):
    settings.ULTIMATE_JOBS = {"DRIVER": "redis", "REDIS_SENTINELS": ["127.0.0.1:1"]}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.meta == {"key": "REDIS_SENTINEL_SERVICE"}


def test_wait_settings_reach_the_store(settings, redis_url, prefix):
    settings.ULTIMATE_JOBS = {
        "DRIVER": "redis",
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": prefix,
        "REDIS_WAIT_REPLICAS": 0,
        "REDIS_WAIT_TIMEOUT": "250ms",
    }
    driver = get_driver()
    assert (driver.store.wait_replicas, driver.store.wait_timeout_ms) == (0, 250)
    driver.close()


def test_redis_keys_are_unknown_to_another_driver(settings):
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "REDIS_URL": "redis://x"}
    with pytest.raises(SettingsInvalid) as refused:
        get_driver()
    assert refused.value.meta["unknown"] == ["REDIS_URL"]


def test_a_keyed_job_stays_in_its_first_queue(redis_driver):
    """Keys and caps are enforced inside one queue's slot: a keyed run of the
    same job to a second queue is refused, before anything is written."""
    first = redis_driver.enqueue(
        EnqueueRequest(name="redis.pinned", input={}, queue="a", idempotency_key="k")
    )
    with pytest.raises(JobsError) as refused:
        redis_driver.enqueue(
            EnqueueRequest(
                name="redis.pinned", input={}, queue="b", idempotency_key="k2"
            )
        )
    assert refused.value.code == "X_REDIS_QUEUE_PINNED"
    assert refused.value.meta == {"job": "redis.pinned", "queue": "b", "pinned": "a"}
    plain = redis_driver.enqueue(
        EnqueueRequest(name="redis.pinned", input={}, queue="b")
    )
    assert redis_driver.get(plain.id).queue == "b"
    again = redis_driver.enqueue(
        EnqueueRequest(name="redis.pinned", input={}, queue="a", idempotency_key="k")
    )
    assert (again.id, again.deduped) == (first.id, True)


def test_a_claim_over_two_queues_serves_the_older_row_first(redis_driver):
    """Queues are claimed in the order of their first due row."""
    old = redis_driver.enqueue(
        EnqueueRequest(name="redis.two", input={}, queue="second", delay_ms=-60_000)
    )
    new = redis_driver.enqueue(
        EnqueueRequest(name="redis.two", input={}, queue="first")
    )
    options = ClaimOptions(
        queues=["first", "second"], limit=1, worker_id="w", visibility_ms=30_000
    )
    assert [j.id for j in redis_driver.claim(options).claimed] == [old.id]
    assert [j.id for j in redis_driver.claim(options).claimed] == [new.id]


def test_the_wake_listener_is_proven_and_hears_due_rows(redis_driver):
    heard: list[str] = []
    live = threading.Event()
    listener = redis_driver.wake_listener(
        heard.append, worker_id="host:1:abc", on_live=lambda up: up and live.set()
    )
    listener.start()
    try:
        assert live.wait(10) and listener.live
        redis_driver.enqueue(EnqueueRequest(name="redis.wake", input={}, queue="wq"))
        redis_driver.enqueue(
            EnqueueRequest(name="redis.wake", input={}, queue="later", delay_ms=60_000)
        )
        wait_until(lambda: "wq" in heard, 10)
        assert "later" not in heard  # no plain wake for a row due later...
        # ... but a timed one: the queue, a tab, when it falls due (Unix ms).
        wait_until(lambda: any(h.startswith("later\t") for h in heard), 10)
        timed = [h for h in heard if h.startswith("later\t")]
        assert len(timed) == 1, heard
        queue, at = split_hint(timed[0])
        assert queue == "later" and at is not None
        assert 59 < at - time.monotonic() < 61
    finally:
        listener.stop()


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_inside_a_transaction_lands_only_after_the_commit(redis_driver):
    """The Redis driver cannot join the caller's transaction: the enqueue
    goes through the outbox, so a rollback enqueues nothing."""
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = noop.enqueue(n=1).id
        raise RuntimeError("roll back")
    with transaction.atomic():
        committed = noop.enqueue(n=2).id
        assert redis_driver.get(committed) is None  # staged, not in Redis yet
    publish_outbox()
    assert redis_driver.get(committed).input == {"n": 2}
    assert redis_driver.get(rolled_back) is None
    assert not OutboxMessage.objects.filter(published_at__isnull=True).exists()


@pytest.mark.django_db(transaction=True)
def test_an_atomic_step_is_refused_with_a_code_that_says_why(redis_driver):
    enqueued = atomic_steps.enqueue(order="o-1")
    run_jobs(driver=redis_driver, queues=["default"])
    row = redis_driver.get(enqueued.id)
    assert row.state == "dead" and row.attempt == 1
    assert row.last_error.startswith("X_STEP_ATOMIC_UNSUPPORTED: step 'reserve'")


def test_a_fresh_driver_finds_a_job_by_id_alone(redis_driver, redis_url, prefix):
    """No process memory needed: ``get`` looks the job's queue up."""
    enqueued = redis_driver.enqueue(
        EnqueueRequest(name="redis.find", input={}, queue="elsewhere", delay_ms=1_000)
    )
    other = RedisDriver(redis_url, prefix=prefix)
    try:
        row = other.get(enqueued.id)
        assert (row.queue, row.state) == ("elsewhere", "delayed")
        assert row.run_at - row.created_at == timedelta(seconds=1)
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_retention_purges_finished_rows_and_the_published_outbox(redis_driver):
    """The retention job's sweep runs on Redis: finished rows past their
    window go, live ones stay; published outbox messages (the Redis driver
    stages enqueues inside transactions) go too."""
    from datetime import UTC, datetime

    from django_ultimate_jobs.maintenance.retention import sweep_retention

    with transaction.atomic():
        staged = noop.enqueue(n=1).id
    publish_outbox()
    done = noop.enqueue(n=2)
    run_jobs(driver=redis_driver, queues=["default"])
    assert {redis_driver.get(i).state for i in (staged, done.id)} == {"done"}
    live = redis_driver.enqueue(
        EnqueueRequest(name="redis.live", input={}, delay_ms=10**9)
    )
    report = sweep_retention(datetime.now(UTC) + timedelta(days=400))
    assert (report["done"], report["outbox"]) == (2, 1)
    assert redis_driver.get(done.id) is None and redis_driver.get(staged) is None
    assert redis_driver.get(live.id).state == "delayed"
    assert OutboxMessage.objects.count() == 0


def test_a_fresh_driver_finds_a_run_s_steps(redis_driver, redis_url, prefix):
    """Steps live in the run's queue slot: another process finds them by the
    run id alone (the operator's ``jobs show``)."""
    from django_ultimate_jobs.drivers.steps import StepFence, StepRecord

    redis_driver.enqueue(EnqueueRequest(name="redis.steps", input={}, queue="runs"))
    (job,) = redis_driver.claim(
        ClaimOptions(queues=["runs"], limit=1, worker_id="w", visibility_ms=30_000)
    ).claimed
    at = redis_driver.now()
    record = StepRecord(
        run_id=job.run_id, name="fetch", status="completed", started_at=at
    )
    redis_driver.steps.put(record, StepFence(job.id, job.identity))
    other = RedisDriver(redis_url, prefix=prefix)
    try:
        (name,) = other.steps.list(job.run_id)
        assert name == "fetch"
        assert other.steps.list(job.id).keys() == {"fetch"}
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_in_a_transaction_is_staged_while_redis_is_down_at_first_use(
    settings, prefix
):
    """Redis away when the process first uses the driver: an enqueue inside
    ``transaction.atomic()`` is staged in PostgreSQL all the same (building
    the driver asks no server), and published once Redis is back (issue 25,
    B2: it raised the client's ConnectionError)."""
    from tests.support.redis import RedisServer

    server = RedisServer()  # its port stays closed until start()
    try:
        settings.ULTIMATE_JOBS = {
            **settings.ULTIMATE_JOBS,
            "DRIVER": "redis",
            "REDIS_URL": server.url,
            "REDIS_PREFIX": prefix,
        }
        with transaction.atomic():
            staged = noop.enqueue(n=3).id
        assert OutboxMessage.objects.filter(id=staged).exists()
        server.start()
        publish_outbox()
        assert get_driver().get(staged).input == {"n": 3}
    finally:
        get_driver().close()
        server.close()
