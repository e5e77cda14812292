"""Settings of the ``runjobs`` subprocesses started by the acceptance tier.

The test suite's settings, pointed at the database pytest-django created
(``ULTIMATE_JOBS_TEST_DB_NAME``, read by the test from its own connection),
with lease and poll timings from environment variables so crash tests run
on short leases:

- ``UJ_VISIBILITY`` (default ``30s``), ``UJ_HEARTBEAT`` (default: a third);
- ``UJ_POLL`` (default ``50ms``) and ``UJ_IDLE_POLL_MAX`` (default
  ``200ms``); an empty value keeps the package default (the wake test);
- ``UJ_CLAIM_BATCH`` (default: the package's);
- ``UJ_METRICS_INTERVAL`` (default: the package's);
- ``UJ_LIMITS``: ``ULTIMATE_JOBS["LIMITS"]`` as JSON (default: none);
- ``UJ_WEBHOOK_LOOPBACK``: let the webhook sender reach 127.0.0.0/8 over http.
- ``UJ_REDIS_URL`` and ``UJ_REDIS_PREFIX``: the Redis driver on that server
  and key prefix (default: the PostgreSQL driver); ``UJ_REDIS_SENTINELS``
  (``host:port`` comma-separated) with ``UJ_REDIS_SERVICE``, and
  ``UJ_REDIS_WAIT_REPLICAS`` with ``UJ_REDIS_WAIT_TIMEOUT``: its keys of
  the same names.
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

DATABASES["default"]["NAME"] = os.environ["ULTIMATE_JOBS_TEST_DB_NAME"]


def _timings() -> dict[str, object]:
    values: dict[str, object] = {
        "QUEUES": ["default"],
        "VISIBILITY_TIMEOUT": os.environ.get("UJ_VISIBILITY", "30s"),
    }
    optional = {
        "HEARTBEAT_INTERVAL": os.environ.get("UJ_HEARTBEAT", ""),
        "POLL_INTERVAL": os.environ.get("UJ_POLL", "50ms"),
        "IDLE_POLL_MAX": os.environ.get("UJ_IDLE_POLL_MAX", "200ms"),
        "METRICS_INTERVAL": os.environ.get("UJ_METRICS_INTERVAL", ""),
    }
    values.update({key: value for key, value in optional.items() if value})
    if os.environ.get("UJ_LIMITS"):
        values["LIMITS"] = json.loads(os.environ["UJ_LIMITS"])
    if os.environ.get("UJ_WEBHOOK_LOOPBACK"):
        # The webhook fault tests' endpoint listens on 127.0.0.1 over http.
        values["WEBHOOK_ALLOW_NETWORKS"] = ["127.0.0.0/8"]
        values["WEBHOOK_ALLOW_HTTP"] = True
    if os.environ.get("UJ_CLAIM_BATCH"):
        values["CLAIM_BATCH"] = int(os.environ["UJ_CLAIM_BATCH"])
    if os.environ.get("UJ_REDIS_URL"):
        values["DRIVER"] = "redis"
        values["REDIS_URL"] = os.environ["UJ_REDIS_URL"]
        values["REDIS_PREFIX"] = os.environ["UJ_REDIS_PREFIX"]
        if os.environ.get("UJ_REDIS_SENTINELS"):
            values["REDIS_SENTINELS"] = os.environ["UJ_REDIS_SENTINELS"].split(",")
            values["REDIS_SENTINEL_SERVICE"] = os.environ["UJ_REDIS_SERVICE"]
        if os.environ.get("UJ_REDIS_WAIT_REPLICAS"):
            values["REDIS_WAIT_REPLICAS"] = int(os.environ["UJ_REDIS_WAIT_REPLICAS"])
            values["REDIS_WAIT_TIMEOUT"] = os.environ["UJ_REDIS_WAIT_TIMEOUT"]
    return values


ULTIMATE_JOBS = _timings()

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "extras": {
            # The app's console formatter: each record's details after it.
            "()": "django_ultimate_jobs.logging.ConsoleFormatter",
            "format": "%(asctime)s %(levelname)s %(threadName)s %(message)s",
        }
    },
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "extras"}},
    "loggers": {
        "django_ultimate_jobs": {
            "handlers": ["stderr"],
            "level": os.environ.get("UJ_LOG_LEVEL", "INFO"),
        },
    },
}
