"""Settings of bench/webhooks.py's processes: the bench settings, loopback allowed.

The sender's workers may reach the bench's endpoint server on 127.0.0.1
over http; the receiver's gunicorn serves ``bench.webhook_urls``.
"""

from bench.bench_settings import *  # noqa: F403

ULTIMATE_JOBS = {
    "QUEUES": ["default"],
    "WEBHOOK_ALLOW_NETWORKS": ["127.0.0.0/8"],
    "WEBHOOK_ALLOW_HTTP": True,
}
ROOT_URLCONF = "bench.webhook_urls"

# Persistent connections, as a deployed receiver runs: a new connection per
# request would measure PostgreSQL's connection setup, not the receiver.
DATABASES["default"]["CONN_MAX_AGE"] = 60  # noqa: F405
