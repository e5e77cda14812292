"""``runjobs --processes N``: supervise N worker processes.

Each child is this same command re-run with ``--processes 1``; the parent
runs no jobs. A child that dies is replaced (after a short backoff when it
keeps dying); a child that exits on purpose (``--max-jobs-per-process``,
too many stuck slots) is replaced at once. SIGTERM/SIGINT are forwarded so
every child drains; a second signal kills them. A child whose supervisor is
gone (``kill -9``, an OOM kill) notices within a second and drains too
(:func:`stop_when_orphaned`), instead of running on unsupervised and holding
its metrics port.

With ``--burst`` each child exits 0 once its burst is over; such a child is
not replaced, and the supervisor returns when every child has ended: 0 when
none died, 1 when one did. A burst child that dies is still replaced (the
jobs it did not reach are still due), but there every death counts towards
the crash loop, however long the child lived: a burst must end.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

__all__ = ["PARENT_ENV", "Supervisor", "stop_when_orphaned"]

logger = logging.getLogger("django_ultimate_jobs")

RESTART_BACKOFF_MAX_S = 10.0
CRASH_LOOP_LIMIT = 5
"""Children in a row that died within CRASH_LOOP_LIFETIME_S of starting."""
CRASH_LOOP_LIFETIME_S = 10.0
EXIT_RECYCLE = 3
"""Exit code of a child that stopped on purpose and wants a replacement."""
PARENT_ENV = "ULTIMATE_JOBS_SUPERVISOR"
"""The supervisor's pid, in each child's environment."""
ORPHAN_CHECK_S = 1.0


class Supervisor:
    """Keep ``processes`` children of ``child_argv`` alive until told to stop.

    ``burst``: the children run ``--burst``; one that exits 0 has finished
    and is not replaced, so :meth:`run` returns once all have finished.
    """

    def __init__(
        self,
        child_argv: Sequence[str],
        processes: int,
        grace_s: float,
        *,
        burst: bool = False,
    ) -> None:
        self.child_argv = list(child_argv)
        self.processes = processes
        self.grace_s = grace_s
        self.burst = burst
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.started_at: dict[int, float] = {}
        self._stopping = False
        self._signals = 0
        self._failures = 0
        self._died = False

    def run(self) -> int:
        """Start the children and keep them alive; returns when they all ended.

        Answers the command's exit status: 1 after a crash loop, or (with
        ``burst``) when a child died during the run; else 0.
        """
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for slot in range(self.processes):
            self._start(slot)
        while self.children:
            for slot, child in list(self.children.items()):
                code = child.poll()
                if code is None:
                    continue
                del self.children[slot]
                if self._stopping:
                    continue
                if self.burst and code == 0:
                    # Its claim found nothing due and it held nothing: done.
                    logger.info(
                        "jobs.supervisor.child-finished",
                        extra={"pid": child.pid, "slot": slot},
                    )
                    continue
                if code == EXIT_RECYCLE:
                    logger.info("jobs.supervisor.recycled", extra={"pid": child.pid})
                    self._failures = 0
                else:
                    lived = time.monotonic() - self.started_at.get(slot, 0.0)
                    # In a burst every death counts: a child that waited out
                    # BURST_CONNECT_WAIT on a database that is down would
                    # otherwise be replaced forever, 30 s at a time.
                    counts = self.burst or lived < CRASH_LOOP_LIFETIME_S
                    self._failures = self._failures + 1 if counts else 1
                    self._died = True
                    logger.error(
                        "jobs.supervisor.child-died",
                        extra={
                            "pid": child.pid,
                            "code": code,
                            "lived_s": round(lived, 1),
                        },
                    )
                    if self._failures >= CRASH_LOOP_LIMIT:
                        # Children that die at start-up will keep dying: say so
                        # and stop, rather than restart them forever.
                        logger.critical(
                            "jobs.supervisor.crash-loop",
                            extra={"failures": self._failures, "code": code},
                        )
                        self._stop_children()
                        return 1
                    time.sleep(
                        min(RESTART_BACKOFF_MAX_S, 0.2 * 2 ** min(self._failures, 6))
                    )
                if not self._stopping:
                    self._start(slot)
            time.sleep(0.1)
        # A burst whose child died may have left that child's jobs running
        # until their leases lapse: the run did not finish what was due.
        return 1 if self.burst and self._died else 0

    def _start(self, slot: int) -> None:
        env = {
            **os.environ,
            "ULTIMATE_JOBS_CHILD": str(slot),
            PARENT_ENV: str(os.getpid()),
        }
        child = subprocess.Popen(self.child_argv, env=env)
        self.started_at[slot] = time.monotonic()
        self.children[slot] = child
        logger.info(
            "jobs.supervisor.started-child", extra={"pid": child.pid, "slot": slot}
        )

    def _stop_children(self) -> None:
        self._stopping = True
        for child in self.children.values():
            try:
                child.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for child in self.children.values():
            try:
                child.wait(timeout=self.grace_s + 5)
            except subprocess.TimeoutExpired:
                child.kill()
        self.children.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self._stopping = True
        forward = signal.SIGTERM if self._signals == 1 else signal.SIGKILL
        for child in self.children.values():
            try:
                child.send_signal(forward)
            except ProcessLookupError:
                pass


def stop_when_orphaned(
    stop: Callable[[str], None], parent: int | None = None
) -> threading.Thread | None:
    """In a supervised child: call ``stop("orphaned")`` once the supervisor
    (``parent``, else the pid in :data:`PARENT_ENV`) is no longer this
    process's parent. Checked every second by a daemon thread, answered;
    ``None`` outside a supervised child."""
    if parent is None:
        given = os.environ.get(PARENT_ENV, "")
        if not given.isdigit():
            return None
        parent = int(given)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        logger.warning(
            "jobs.supervisor.orphaned",
            extra={
                "supervisor": parent,
                "fix": "nothing to do: this child drains and exits; start runjobs "
                "again (a process manager restarts it)",
            },
        )
        stop("orphaned")

    thread = threading.Thread(target=watch, name="orphan-watch", daemon=True)
    thread.start()
    return thread
