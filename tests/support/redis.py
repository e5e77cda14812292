"""Redis for the tests: the shared server under a key prefix of one's own,
or a ``redis-server`` process of one's own (for tests that stop or kill it).

``ULTIMATE_JOBS_TEST_REDIS`` names the shared server (default
``redis://127.0.0.1:6379/0``, which ``.ci/run`` starts when none answers);
every test's keys start with ``test_uj_<ULTIMATE_JOBS_TEST_DB suffix>:``
and are deleted after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import retry_until

__all__ = [
    "RedisSentinel",
    "RedisServer",
    "drop_prefix",
    "fresh_prefix",
    "redis_url",
    "require_redis",
]


def redis_url() -> str:
    """The shared test server's URL."""
    return os.environ.get("ULTIMATE_JOBS_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _namespace() -> str:
    database = os.environ.get("ULTIMATE_JOBS_TEST_DB", "test_uj")
    return database if database.startswith("test_uj") else f"test_uj_{database}"


def fresh_prefix() -> str:
    """A key prefix no other test (or engineer) uses."""
    return f"{_namespace()}-{uuid.uuid4().hex[:12]}"


def drop_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (every slot of it)."""
    import redis

    client = redis.Redis.from_url(url)
    if int(client.info("cluster").get("cluster_enabled", 0)) == 1:
        client.close()
        client = redis.cluster.RedisCluster.from_url(url)
    try:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
    finally:
        client.close()


def require_redis(url: str | None = None) -> str:
    """The shared server's URL; the test fails (not skips) when none answers."""
    import redis

    url = url or redis_url()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.exceptions.ConnectionError as error:
        pytest.fail(
            f"no Redis answers at {url} ({error}): start one (bash .ci/run does), "
            "or set ULTIMATE_JOBS_TEST_REDIS"
        )
    return url


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    return binary


def _wait_for_ping(port: int, process: subprocess.Popen[bytes]) -> None:
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        retry_until(
            client.ping,
            15,
            (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError),
            give_up=lambda: process.poll() is not None,
        )
    finally:
        client.close()


class RedisServer:
    """A ``redis-server`` of the test's own, with AOF on (``appendfsync
    everysec``), that the test may stop, kill and start again on the same
    port and data directory. It reads a config file of its own (empty but
    for what ``CONFIG REWRITE`` writes: a Sentinel reconfiguring it)."""

    def __init__(self, *extra: str) -> None:
        self.binary = _binary()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="uj-redis-"))
        self.config = self.dir / "redis.conf"
        self.config.write_text("")
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart) the server and wait until it answers."""
        self.process = subprocess.Popen(
            [
                self.binary,
                str(self.config),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_ping(self.port, self.process)

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGKILL with ``kill``) and wait for it."""
        process = self.process
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        process.wait(timeout=30)
        self.process = None

    def close(self) -> None:
        """Stop the server and delete its data."""
        with contextlib.suppress(Exception):
            self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisSentinel(RedisServer):
    """A Redis Sentinel of the test's own watching ``service`` at
    ``primary_port``: quorum 1, the primary down after 2 s (1 s failed over
    a primary merely slow on a loaded machine), so killing it fails over to
    its most advanced replica within a few seconds."""

    def __init__(self, primary_port: int, service: str = "uj") -> None:
        super().__init__()
        self.service = service
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"logfile {self.dir / 'sentinel.log'}\n"
            f"sentinel monitor {service} 127.0.0.1 {primary_port} 1\n"
            f"sentinel down-after-milliseconds {service} 2000\n"
            f"sentinel failover-timeout {service} 10000\n"
            f"sentinel parallel-syncs {service} 4\n"
        )

    def start(self) -> None:
        """Start the Sentinel and wait until it answers."""
        self.process = subprocess.Popen(
            [self.binary, str(self.config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_ping(self.port, self.process)

    def primary_port(self) -> int:
        """The port of the primary the Sentinel names now."""
        import redis

        client = redis.Redis(port=self.port, decode_responses=True)
        try:
            _, port = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        return int(port)


@contextlib.contextmanager
def own_redis(*extra: str) -> Iterator[RedisServer]:
    """A started :class:`RedisServer`, closed after the block."""
    server = RedisServer(*extra)
    try:
        server.start()
        yield server
    finally:
        server.close()


def wait_for_replicas(url: str, count: int, timeout: float = 30.0) -> None:
    """Wait until ``count`` replicas of the primary at ``url`` confirm a
    write (``WAIT``): connected is not enough, a replica just synced takes
    seconds more before it acknowledges."""
    import redis

    from tests.support.waiting import wait_until

    client = redis.Redis.from_url(url)
    try:

        def confirmed() -> bool:
            client.set("uj-test-replication-probe", "1")
            return int(client.wait(count, 100)) >= count

        wait_until(confirmed, timeout)
        client.delete("uj-test-replication-probe")
    finally:
        client.close()
