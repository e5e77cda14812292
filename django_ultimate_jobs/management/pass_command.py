"""``PassCommand``: the shape of ``jobs_reindex``, ``jobs_export`` and ``jobs_import``.

``--list`` shows every declaration and its progress rows; ``NAME`` alone
is a dry run (what a pass would do, nothing written); ``NAME --write``
queues the pass (a worker runs it) and follows it: a progress bar on a
terminal, a plain line every few seconds otherwise (see :mod:`.progress`).
A refusal prints the coded error and exits 1. Every line holds stored
text (names, prefixes, errors) and is printed through
:func:`~django_ultimate_jobs.terminal.printable`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..errors import JobsError
from ..terminal import printable
from .progress import Progress, follow

if TYPE_CHECKING:
    from ..drivers.base import Enqueued

__all__ = ["PassCommand", "Queued"]


class Queued:
    """What :meth:`PassCommand.enqueue` answers: the run and how to follow it."""

    def __init__(
        self, label: str, enqueued: Enqueued, record: Callable[[], Any], unit: str
    ) -> None:
        self.label = label
        self.enqueued = enqueued
        self.record = record
        self.unit = unit


class PassCommand(BaseCommand):
    """List, dry-run or run the passes of one kind (a subclass per kind)."""

    kind = "pass"
    rerun_flag = "--force"
    rerun_help = "run a done (or paused) one again from its first row"
    takes_prefix = False

    def add_arguments(self, parser: CommandParser) -> None:
        """``NAME``, ``--list``, ``--write``, the rerun flag, ``--no-follow``."""
        parser.add_argument(
            "name", nargs="?", help=f"the {self.kind} to dry-run or run"
        )
        parser.add_argument(
            "--list",
            action="store_true",
            help=f"every declared {self.kind} and its progress",
        )
        if self.takes_prefix:
            parser.add_argument(
                "--prefix",
                help="where the artifact is, in the storage (exports/2026-05)",
            )
        parser.add_argument(
            "--write",
            action="store_true",
            help="run it (enqueue its pass); without it, a dry run",
        )
        parser.add_argument(
            self.rerun_flag, action="store_true", dest="rerun", help=self.rerun_help
        )
        parser.add_argument(
            "--no-follow",
            action="store_true",
            help="with --write: enqueue and return, without following the progress",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch on the options; refusals become CommandError (exit 1)."""
        if bool(options["list"]) == bool(options["name"]):
            raise CommandError("give NAME or --list")
        if options["list"] and options["write"]:
            raise CommandError("--write runs NAME; --list only shows")
        for flag, dest in ((self.rerun_flag, "rerun"), ("--no-follow", "no_follow")):
            if options[dest] and not options["write"]:
                raise CommandError(
                    f"{flag} is for --write; without --write it is a dry run"
                )
        if self.takes_prefix and options["name"] and not options["prefix"]:
            raise CommandError(
                f"--prefix is required: where the {self.kind}'s artifact is"
            )
        try:
            if options["list"]:
                for line in self.list_lines():
                    self.stdout.write(printable(line))
            elif not options["write"]:
                self.stdout.write(printable(self.dry_run(options)))
                self.stdout.write("dry run: pass --write to run it")
            else:
                queued = self.enqueue(options)
                note = " (already queued)" if queued.enqueued.deduped else ""
                self.stdout.write(
                    printable(
                        f"{queued.label}: pass queued as job {queued.enqueued.id}{note}"
                    )
                )
                if not options["no_follow"]:
                    follow(
                        Progress(self.stdout, queued.label, unit=queued.unit),
                        queued.enqueued,
                        queued.record,
                        what=printable(queued.label),
                        listing=f"python manage.py jobs_{self.kind} --list",
                    )
        except JobsError as error:
            # The message may quote a name given on the command line.
            raise CommandError(printable(error.render())) from error

    def list_lines(self) -> list[str]:
        """What ``--list`` prints."""
        raise NotImplementedError

    def dry_run(self, options: dict[str, Any]) -> str:
        """What ``NAME`` prints; refuses as the pass would."""
        raise NotImplementedError

    def enqueue(self, options: dict[str, Any]) -> Queued:
        """Queue the pass ``NAME --write`` asks for."""
        raise NotImplementedError


def describe(row: Any, *, unit: str = "page") -> str:
    """``state, rows done / total rows, N pages[, finished ...][, last error: ...]``."""
    from .progress import pages

    total = "?" if row.total is None else f"{row.total:,}"
    text = f"{row.state}, {row.rows_done:,}/{total} rows, {pages(row.pages_done, unit)}"
    if row.finished_at is not None:
        text += f", finished {row.finished_at.isoformat()}"
    if row.error:
        text += f", last error: {row.error}"
    return text
