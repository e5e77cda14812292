"""Pub/sub wake: a hint that makes the next claim sooner, never more.

Every script that makes a row due publishes the queue's name on the
channel ``<prefix>:wake``. One connection per worker process subscribes
(:class:`RedisWakeListener`); after each (re)subscription it publishes a
probe (an empty message) and counts the wake as proven ("live") only once
the probe comes back, as the LISTEN thread does on PostgreSQL. The probe
wakes every loop once (catch-up for what was missed while away). A lost
connection re-dials with equal-jitter backoff from 1 s to 5 s, at once
when another role of the process finds Redis back. Nothing is lost with a
message: the claim loop polls anyway.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..outage import process_outage
from .client import session_client
from .sessions import is_unavailable, role_name

if TYPE_CHECKING:
    from .store import RedisStore

__all__ = ["RedisWakeListener"]

logger = logging.getLogger("django_ultimate_jobs")

VERIFY_TIMEOUT_S = 5.0
RETRY_BASE_S = 1.0
RETRY_MAX_S = 5.0


class RedisWakeListener:
    """The subscriber thread of a worker process (``driver.wake_listener()``)."""

    def __init__(
        self,
        store: RedisStore,
        *,
        on_wake: Callable[[str], None],
        on_live: Callable[[bool], None] | None,
        worker_id: str,
    ) -> None:
        self.store = store
        self.on_wake = on_wake
        self.on_live = on_live
        self.name = role_name("listen", worker_id)
        self.live = False
        self._stop = threading.Event()
        self._redial_now = threading.Event()
        self._thread: threading.Thread | None = None
        self._pubsub: Any = None

    def start(self) -> None:
        """Start listening in a daemon thread."""
        self._thread = threading.Thread(
            target=self._main, name="uj-listener", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (idempotent)."""
        self._stop.set()
        self._redial_now.set()
        pubsub = self._pubsub
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:
                logger.debug("jobs.wake.close-failed", exc_info=True)
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _set_live(self, live: bool) -> None:
        if live != self.live:
            self.live = live
            if live:
                logger.info("jobs.wake.live")
            if self.on_live is not None:
                self.on_live(live)

    def _main(self) -> None:
        outage = process_outage()
        outage.on_recovery(self._redial_now.set)
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    self._session()
                    failures = 0
                except Exception as error:
                    if self._stop.is_set():
                        break
                    failures += 1
                    if is_unavailable(error):
                        outage.lost("listen", error, last_ok=None, using="redis")
                    else:
                        logger.warning("jobs.wake.listen-failed", exc_info=True)
                self._set_live(False)
                if not self._stop.is_set():
                    cap = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** min(failures, 10))
                    self._redial_now.wait(cap / 2 + random.random() * cap / 2)
                    self._redial_now.clear()
        finally:
            outage.off_recovery(self._redial_now.set)

    def _session(self) -> None:
        store = self.store
        channel = store.layout.channel
        client = (
            store.client if store.cluster else session_client(store.endpoint, self.name)
        )
        self._pubsub = pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(channel)
            if not store.cluster:
                process_outage().recovered("listen", using="redis")
            store.client.publish(channel, "")  # the probe
            probe_sent = time.monotonic()
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is not None and message.get("type") == "message":
                    payload = message["data"] or ""
                    if not payload and not self.live:
                        self._set_live(True)
                    self.on_wake(payload)
                if not self.live and time.monotonic() - probe_sent > VERIFY_TIMEOUT_S:
                    logger.warning("jobs.wake.unverified")
                    store.client.publish(channel, "")
                    probe_sent = time.monotonic()
        finally:
            self._pubsub = None
            pubsub.close()
            if not store.cluster:
                client.close()
