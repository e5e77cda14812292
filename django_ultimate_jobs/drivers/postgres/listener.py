"""LISTEN/NOTIFY wake: a hint that makes the next poll sooner, never more.

One dedicated psycopg connection per worker process LISTENs on
``ultimate_jobs_wake`` (never one of Django's connections: those are reused
by threads and sit in transactions). After each (re)subscription a probe
``pg_notify`` is sent through Django's connection; the wake counts as proven
("live") only once that probe comes back, which is how a transaction-pooling
PgBouncer, that accepts LISTEN and delivers nothing, is detected
(``jobs.wake.unverified``). Losing the connection re-dials with equal-jitter
backoff from 1 s to 5 s, at once when another role of the process finds the
database back; every re-dial resets the proof, and the probe's empty payload
wakes every loop once (catch-up for what was missed). A database that is
away is reported once by the process (:mod:`.sessions`), not per re-dial.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connections

from ...wake import wake_hub
from .sessions import RoleConnection, is_unavailable

__all__ = ["CHANNEL", "WakeListener", "listen_conninfo"]

logger = logging.getLogger("django_ultimate_jobs")

CHANNEL = "ultimate_jobs_wake"
VERIFY_TIMEOUT_S = 5.0
RETRY_BASE_S = 1.0
RETRY_MAX_S = 5.0
# Keys Django adds for its own connection handling; psycopg.connect() takes
# none of them.
_DJANGO_ONLY = (
    "context",
    "cursor_factory",
    "prepare_threshold",
    "server_side_binding",
    "isolation_level",
    "assume_role",
    "pool",
)


def listen_conninfo(using: str) -> dict[str, Any]:
    """The connection keywords of a Django alias, for a dedicated connection."""
    params = dict(connections[using].get_connection_params())
    for key in _DJANGO_ONLY:
        params.pop(key, None)
    # Dead peers are found by TCP keepalives rather than by polling
    # statements, which would count against the idle budget.
    params.setdefault("keepalives", 1)
    params.setdefault("keepalives_idle", 30)
    params.setdefault("keepalives_interval", 10)
    params.setdefault("keepalives_count", 3)
    return params


class WakeListener:
    """The LISTEN thread of a worker process (``driver.wake_listener()``)."""

    def __init__(
        self,
        using: str = "default",
        *,
        on_wake: Callable[[str], None] = wake_hub.notify,
        on_live: Callable[[bool], None] | None = None,
        role: RoleConnection | None = None,
    ) -> None:
        self.using = using
        self.on_wake = on_wake
        """Called with each notification's queue (``""``: the probe, any queue)."""
        self.on_live = on_live
        self.role = role
        """Names both connections (``application_name``) and shares the outage."""
        self.live = False
        self._stop = threading.Event()
        self._redial_now = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._unverified_reported = False

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
        conn = self._conn
        if conn is not None:
            try:
                conn.close()
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
        failures = 0
        params = listen_conninfo(self.using)
        if self.role is not None:
            self.role.bind()
            params["application_name"] = self.role.name
            self.role.outage.on_recovery(self._redial_now.set)
        try:
            while not self._stop.is_set():
                try:
                    self._session(params)
                    failures = 0
                except Exception as error:
                    if self._stop.is_set():
                        break
                    failures += 1
                    self._report(error)
                self._set_live(False)
                if not self._stop.is_set():
                    cap = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** min(failures, 10))
                    self._redial_now.wait(cap / 2 + random.random() * cap / 2)
                    self._redial_now.clear()
        finally:
            if self.role is not None:
                self.role.outage.off_recovery(self._redial_now.set)
            connections.close_all()

    def _report(self, error: Exception) -> None:
        conn = self._conn
        if self.role is not None and is_unavailable(error, conn):
            # The process reports the outage once; the listener re-dials.
            self.role.failing = True
            self.role.outage.lost(self.role.role, error, last_ok=None)
            return
        logger.warning("jobs.wake.listen-failed", exc_info=True)

    def _session(self, params: dict[str, Any]) -> None:
        self._conn = None
        with psycopg.connect(**params, autocommit=True) as conn:
            self._conn = conn
            conn.execute(f"LISTEN {CHANNEL}")
            if self.role is not None:
                self.role.ok()
            self._probe()
            probe_sent = time.monotonic()
            while not self._stop.is_set():
                for note in conn.notifies(timeout=1.0):
                    if not note.payload and not self.live:
                        self._set_live(True)
                    self.on_wake(note.payload)
                if (
                    not self.live
                    and not self._unverified_reported
                    and time.monotonic() - probe_sent > VERIFY_TIMEOUT_S
                ):
                    self._unverified_reported = True
                    logger.warning(
                        "jobs.wake.unverified",
                        extra={
                            "fix": "point the worker at a direct or session-pooled database "
                            "URL (PgBouncer pool_mode=transaction accepts LISTEN and "
                            "delivers nothing); polling still picks every job up"
                        },
                    )

    def _probe(self) -> None:
        # Through Django's connection, as enqueues notify: proof that a
        # notification crosses from the pool to this session. That
        # connection may have died with the one just re-dialled (a restart,
        # a failover): it is reset and the probe sent once more, or the
        # wake would stay unproven for the life of the process.
        last: Exception | None = None
        for _ in range(2):
            try:
                with connections[self.using].cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])
                return
            except Exception as error:
                last = error
                try:
                    connections[self.using].close()
                except Exception:  # a dead socket: drop it, reconnect next time
                    connections[self.using].connection = None
        logger.warning("jobs.wake.probe-failed", exc_info=last)
