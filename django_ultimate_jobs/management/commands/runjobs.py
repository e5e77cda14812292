"""``manage.py runjobs``: run the worker (threads, or supervised processes)."""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.autoreload import get_child_arguments

from ...checks import behind_transaction_pooler
from ...conf import jobs_settings
from ...drivers import driver_class, get_driver
from ...drivers.outage import process_outage
from ...durations import MAX_DURATION_MS
from ...errors import JobsError, SettingsInvalid
from ...logging import console_by_default
from ...outbox.relay import OutboxRelay, install_local_relay
from ...outbox.store import outbox_database
from ...validation import name_problem
from ...wake import wake_hub
from ...worker.config import WorkerConfig
from ...worker.heap import settle_heap
from ...worker.runner import Worker, new_worker_id
from ...worker.scheduler import Scheduler, SchedulerThread
from ...worker.supervisor import EXIT_RECYCLE, Supervisor, stop_when_orphaned

if TYPE_CHECKING:
    from ...metrics.server import MetricsServer

MAX_PROCESSES = 64
"""A ceiling on ``--processes``: past it the host, not the flag, is the limit."""
METRICS_ADDR = "127.0.0.1"
"""Where ``--metrics-port`` listens unless ``--metrics-addr`` says: this host
only, so metrics are never exposed by accident (a container passes 0.0.0.0)."""

logger = logging.getLogger("django_ultimate_jobs")


class Command(BaseCommand):
    """Claim and run jobs until SIGTERM (drains) or, with --burst, until idle."""

    help = "Run the django-ultimate-jobs worker."

    def get_version(self) -> str:
        """``runjobs --version``: the release of django-ultimate-jobs that runs."""
        import django

        from ... import __version__

        return f"django-ultimate-jobs {__version__} (Django {django.get_version()})"

    def add_arguments(self, parser: CommandParser) -> None:
        """The command's options (documented in docs/reference/commands.md)."""
        parser.add_argument("--queues", help="comma-separated queues (default: QUEUES)")
        parser.add_argument("--concurrency", type=int, help="slot threads per process")
        parser.add_argument("--processes", type=int, default=1, help="worker processes")
        parser.add_argument(
            "--burst",
            action="store_true",
            help="exit when nothing is due and nothing runs "
            "(with --processes N, once every child has)",
        )
        parser.add_argument(
            "--max-jobs-per-process", type=int, help="recycle a process after N jobs"
        )
        parser.add_argument(
            "--shutdown-deadline",
            type=float,
            help="seconds to drain on SIGTERM (default 25)",
        )
        parser.add_argument(
            "--no-wake", action="store_true", help="poll only (no LISTEN)"
        )
        parser.add_argument(
            "--no-scheduler", action="store_true", help="no cron scheduler"
        )
        parser.add_argument("--no-relay", action="store_true", help="no outbox relay")
        parser.add_argument(
            "--relay-only",
            action="store_true",
            help="run only the outbox relay (no worker, no scheduler)",
        )
        parser.add_argument(
            "--no-housekeeping",
            action="store_true",
            help="do not serve HOUSEKEEPING_QUEUE (the built-in jobs' queue)",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve Prometheus metrics on this port (the prometheus extra); "
            "with --processes N, child k serves on port + k",
        )
        parser.add_argument(
            "--metrics-addr",
            help=f"the address the metrics listen on (default {METRICS_ADDR})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the worker, or supervise ``--processes`` of them."""
        # Without a LOGGING route for the app, human lines on stderr rather
        # than Python's last resort, which prints bare event names.
        console_by_default()
        processes = options["processes"]
        # Refused, not clamped: a typo of 1000 would fork a thousand Django
        # processes, each with its connections, before anything else fails.
        if processes is None or not 1 <= processes <= MAX_PROCESSES:
            raise CommandError(
                SettingsInvalid(
                    f"--processes must be a whole number from 1 to {MAX_PROCESSES}, "
                    f"got {processes!r}",
                    fix="pass --processes about the host's core count; "
                    "for more, run runjobs on more hosts",
                ).render()
            )
        try:
            _refuse_an_unshared_driver()
            if options["relay_only"]:
                _refuse_with_relay_only(options)
                outbox_database()  # a relay needs it: refused before it starts
                self._relay_only(burst=options["burst"])
                return
            if not options["no_relay"]:
                outbox_database()
            metrics = _metrics_options(options)
            config = self._config(options)
        except JobsError as error:
            raise CommandError(error.render()) from error
        if processes > 1:
            # The autoreloader's helper rebuilds this process's command line
            # the way Python started it (a script, or `python -m django`).
            argv = _drop_value(get_child_arguments(), "--processes")
            argv = [a for a in argv if not a.startswith("--processes=")]
            grace = config.shutdown_deadline_ms / 1000
            # The scheduler runs once per host, in the parent, not per child.
            # The relay role too; children still publish their own commits.
            child = [*argv, "--processes", "1", "--no-scheduler", "--no-relay"]
            with _scheduler(options), _relay(options, None):
                burst = options["burst"]
                code = Supervisor(child, processes, grace, burst=burst).run()
            sys.exit(code)
        worker = Worker(config)
        # This process is a worker: its boot heap is frozen for the collector
        # (worker/heap.py), once everything it imports at start is loaded.
        settle_heap()
        if behind_transaction_pooler(jobs_settings().database) and config.wake:
            logger.warning(
                "jobs.wake.pooled",
                extra={"fix": "a direct or session-pooled database URL for workers"},
            )
            self.stderr.write(
                "runjobs: the jobs database looks pooled in transaction mode; "
                "LISTEN wake-ups will not arrive and polling picks jobs up"
            )
        # A worker that never reached its store says so here, in one line
        # (repeated at most once a minute), whatever the logging setup.
        worker.outage.on_unreachable(self._say)
        _install_signals(worker)
        # A child of --processes drains when its supervisor is gone.
        stop_when_orphaned(lambda reason: worker.request_stop(reason=reason))
        # The store answers (and holds the tables) before the listener and
        # the relay start: a worker that cannot serve says so once and ends.
        if not worker.reach():
            if worker.exit_status:
                raise CommandError(_why_stopped(worker, config.connect_wait_ms))
            return
        listener = None
        if config.wake:
            # None unless the driver declares features.wake_listener.
            listener = worker.driver.wake_listener(
                wake_hub.notify,
                worker_id=worker.id,
                on_live=lambda live: _set_live(worker, live),
            )
            if listener is None and worker.driver.features.wake_listener:
                # A lying flag would leave the worker polling, silently.
                raise CommandError(_no_listener(worker.driver.name).render())
        try:
            server = _serve_metrics(worker, metrics)
        except JobsError as error:
            raise CommandError(error.render()) from error
        if listener is not None:
            listener.start()
        self.stdout.write(
            f"runjobs {worker.id}: queues={','.join(config.queues)} "
            f"concurrency={config.concurrency}"
        )
        if server is not None:
            self.stdout.write(f"runjobs {worker.id}: metrics on {server.url}")
        try:
            with _relay(options, worker) as relay:
                status = worker.run(
                    install_signals=_install_signals,
                    outstanding=None if relay is None else relay.outstanding,
                )
        finally:
            if listener is not None:
                listener.stop()
            if server is not None:
                server.stop()
        if status:
            raise CommandError(_why_stopped(worker, config.connect_wait_ms))
        if worker.exit_reason in ("max-jobs", "stuck-slots") and os.environ.get(
            "ULTIMATE_JOBS_CHILD"
        ):
            sys.exit(EXIT_RECYCLE)

    def _say(self, line: str) -> None:
        self.stderr.write(f"runjobs: {line}")

    def _relay_only(self, *, burst: bool) -> None:
        """``--relay-only``: the relay role until SIGTERM/SIGINT.

        With ``--burst``: publish what is pending now, in this thread, and
        exit (1 when a message could not be published).
        """
        # The relay's sessions report to the process's outage tracker.
        process_outage().on_unreachable(self._say)
        if burst:
            inline = OutboxRelay(poll=True)
            self.stdout.write(f"runjobs {inline.worker_id}: relay only, burst")
            wait_ms = jobs_settings().burst_connect_wait_ms
            try:
                failed = inline.publish_now(connect_wait_s=wait_ms / 1000)
            except JobsError as error:
                raise CommandError(error.render()) from error
            self.stdout.write(f"published {inline.published} outbox messages")
            if failed:
                sys.exit(1)
            return
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        with _relay({"no_relay": False}, None) as relay:
            assert relay is not None
            self.stdout.write(f"runjobs {relay.worker_id}: relay only")
            stop.wait()

    def _config(self, options: dict[str, Any]) -> WorkerConfig:
        settings = jobs_settings()
        queues = settings.queues
        if options["queues"] is not None:
            queues = _queue_list(options["queues"])
        # Every worker also serves the built-in jobs' queue, so retention and
        # partitions run wherever a worker runs, off the apps' own queues.
        if queues and not options["no_housekeeping"]:
            queues = tuple(dict.fromkeys((*queues, settings.housekeeping_queue)))
        return WorkerConfig.from_settings(
            queues=queues,
            concurrency=options["concurrency"],
            burst=options["burst"] or None,
            max_jobs=options["max_jobs_per_process"],
            shutdown_deadline_ms=_deadline_ms(options["shutdown_deadline"]),
            wake=False if options["no_wake"] else None,
            scheduler=not options["no_scheduler"],
        )


_WORKER_OPTIONS = (
    ("queues", "--queues"),
    ("concurrency", "--concurrency"),
    ("max_jobs_per_process", "--max-jobs-per-process"),
    ("shutdown_deadline", "--shutdown-deadline"),
    ("no_wake", "--no-wake"),
    ("no_housekeeping", "--no-housekeeping"),
    ("no_relay", "--no-relay"),
    ("metrics_port", "--metrics-port"),
    ("metrics_addr", "--metrics-addr"),
)
"""Options of the worker (or against the relay): ``--relay-only`` runs no
worker, so each is refused with it rather than silently ignored."""


def _refuse_with_relay_only(options: dict[str, Any]) -> None:
    given = [flag for key, flag in _WORKER_OPTIONS if options[key] not in (None, False)]
    if options["processes"] != 1:
        given.insert(0, "--processes")
    if given:
        raise SettingsInvalid(
            f"--relay-only runs no worker, so {', '.join(given)} would do nothing "
            "(or contradicts it)",
            fix="drop those options, or run the relay beside a worker: runjobs "
            "without --relay-only runs both",
            meta={"options": given},
        )


def _refuse_an_unshared_driver() -> None:
    """Refuse a driver whose jobs live in one process (``features.shared_across_processes``).

    A ``runjobs`` process of its own would never see a job another process
    enqueued: it would sit idle while the jobs wait.
    """
    # Asked of the class, before the driver is built (building may connect).
    name = jobs_settings().driver
    cls = driver_class(name)
    if not cls.features.shared_across_processes:
        raise SettingsInvalid(
            f"ULTIMATE_JOBS['DRIVER'] is {name!r}, whose jobs live "
            "in one process: a runjobs process would never see the jobs your other "
            "processes enqueue",
            fix="run workers with a driver other processes share (DRIVER "
            "'postgres'); in tests, run_jobs() runs the jobs in the test's process",
            meta={"driver": cls.name},
        )
    get_driver()


def _no_listener(name: str) -> SettingsInvalid:
    """The driver declares ``features.wake_listener`` and answered none."""
    return SettingsInvalid(
        f"the driver {name!r} declares features.wake_listener, but its "
        "wake_listener() answered None: workers would poll without saying so",
        fix="return a listener from wake_listener(), or declare "
        "wake_listener=False in the driver's features (docs/howto/writing-a-driver.md)",
        meta={"driver": name},
    )


def _metrics_options(options: dict[str, Any]) -> tuple[str, int] | None:
    """``(addr, port)`` of this process's metrics endpoint, or None.

    Checked before anything starts: the port (and, with ``--processes N``,
    every child's port + k) must be a TCP port, and the client installed;
    with ``--processes N``, every child's port must be free to bind.
    """
    port, addr = options["metrics_port"], options["metrics_addr"]
    if port is None:
        if addr is not None:
            raise SettingsInvalid(
                "--metrics-addr without --metrics-port serves nothing",
                fix="add --metrics-port 9108 (or drop --metrics-addr)",
            )
        return None
    last = port + options["processes"] - 1
    if not (1 <= port and last <= 65535):
        raise SettingsInvalid(
            f"--metrics-port must be a TCP port from 1 to 65535 (with --processes "
            f"{options['processes']}, up to {65535 - options['processes'] + 1}), "
            f"got {port!r}",
            fix="pass a free port, e.g. --metrics-port 9108",
        )
    if addr is not None and not addr.strip():
        raise SettingsInvalid(
            "--metrics-addr is empty", fix="pass an address such as 0.0.0.0"
        )
    from ...metrics.errors import require_client

    require_client()
    child = os.environ.get("ULTIMATE_JOBS_CHILD")
    addr = addr or METRICS_ADDR
    if child is None and options["processes"] > 1:
        # The supervisor: every child's port must be free before any starts.
        from ...metrics.server import check_ports

        check_ports(addr, range(port, last + 1))
    offset = int(child) if child and child.isdigit() else 0
    return (addr, port + offset)


def _serve_metrics(
    worker: Worker, where: tuple[str, int] | None
) -> MetricsServer | None:
    """Start this process's metrics endpoint (a ``MetricsServer``), or None."""
    if where is None:
        return None
    from ...metrics.server import MetricsServer

    addr, port = where
    return MetricsServer(worker, addr=addr, port=port)


_QUEUES_FIX = (
    "pass comma-separated queue names without spaces, e.g. --queues default,emails "
    "(or leave --queues out to serve ULTIMATE_JOBS['QUEUES'])"
)


def _queue_list(text: str) -> tuple[str, ...]:
    """``--queues a,b`` as names, each held to the one queue-name rule.

    Refused, never normalised: an empty list, an empty item (``a,,b``) or
    spaces around a name would otherwise serve queues nobody asked for.
    """
    if not text:
        raise SettingsInvalid("--queues is empty: it names no queue", fix=_QUEUES_FIX)
    names = text.split(",")
    for index, name in enumerate(names, start=1):
        problem = name_problem(name)
        if problem is not None:
            raise SettingsInvalid(
                f"--queues item {index} ({name!r:.80}) {problem}",
                fix=_QUEUES_FIX,
                meta={"item": index},
            )
    return tuple(names)


def _deadline_ms(seconds: float | None) -> int | None:
    """``--shutdown-deadline`` in milliseconds, refusing nan, inf and 0."""
    if seconds is None:
        return None
    ms = seconds * 1000
    if not (math.isfinite(ms) and 1 <= ms <= MAX_DURATION_MS):
        raise SettingsInvalid(
            f"--shutdown-deadline must be from 0.001 to {MAX_DURATION_MS // 1000} "
            f"seconds (100 years), got {seconds!r}",
            fix="pass the seconds a draining worker may take, e.g. "
            "--shutdown-deadline 25",
        )
    return round(ms)


@contextmanager
def _scheduler(options: dict[str, Any]) -> Iterator[None]:
    """The supervisor's own cron scheduler thread around the body, unless turned off.

    A worker process runs its own (``WorkerConfig.scheduler``); the parent of
    ``--processes N`` runs no worker, and its children run none.
    """
    from ...crontask import registered_tasks

    # With no task declared there is nothing to lead: no lease traffic.
    if options["no_scheduler"] or not registered_tasks():
        yield
        return
    role = get_driver().sessions.open("schedule", worker_id=new_worker_id())
    thread = SchedulerThread(Scheduler(role=role))
    thread.start()
    try:
        yield
    finally:
        thread.stop()


@contextmanager
def _relay(
    options: dict[str, Any], worker: Worker | None
) -> Iterator[OutboxRelay | None]:
    """Run the outbox relay role around the body, unless ``--no-relay``.

    It is also this process's relay for commit callbacks (a job body that
    enqueues through the outbox wakes it).
    """
    if options["no_relay"]:
        yield None
        return
    relay = OutboxRelay(
        poll=True,
        worker_id=worker.id if worker is not None else None,
        outage=worker.outage if worker is not None else None,
    )
    previous = install_local_relay(relay)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()
        install_local_relay(previous)


def _why_stopped(worker: Worker, connect_wait_ms: int) -> str:
    """The one line a worker that could not serve ends with."""
    refused = worker.lifecycle.refused
    if refused is not None:
        return refused.render()
    return (
        f"the jobs database did not answer within {connect_wait_ms / 1000:g} s "
        "(ULTIMATE_JOBS['BURST_CONNECT_WAIT']); the line above says where it was "
        "looked for"
    )


def _set_live(worker: Worker, live: bool) -> None:
    worker.backoff.wake_live = live


def _install_signals(worker: Worker) -> None:
    received = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        if received > 1:
            # A second signal means "now": skip the drain. Status 0, as
            # django-tasks' db_worker ends on a second Ctrl-C: the worker
            # stopped as asked (the jobs it held are retried once their
            # leases lapse; jobs.worker.exit-now says so).
            logger.warning("jobs.worker.exit-now", extra={"signal": signum})
            os._exit(0)
        worker.request_stop(reason=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _drop_value(argv: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for index, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == flag and index + 1 < len(argv):
            skip = True
            continue
        out.append(arg)
    return out
