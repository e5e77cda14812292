"""``manage.py jobs_consumer``: list, show, run, pause and resume stream consumers.

- no argument: every declared consumer, its state, cursor and counts;
- ``NAME``: that consumer;
- ``NAME --run``: queue a run now (as the supervisor would) and follow it
  (items handled and the rate on a terminal; ``--no-follow`` returns);
- ``NAME --pause`` / ``--resume``: stop it before its next batch commits /
  let the supervisor start it again (a halted one's error cleared);
- ``NAME --set-cursor JSON``: set the cursor of a paused or halted one
  (backwards too: re-reading a stream is a decision, made here).

A refusal prints the coded error and exits 1, with nothing changed. The
cursor is printed through ``redact()`` (``REDACT_KEYS``), and every line
(names, cursors, errors) through
:func:`~django_ultimate_jobs.terminal.printable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...consumers import (
    get_consumer,
    pause_consumer,
    registered_consumers,
    resume_consumer,
    run_consumer,
    set_consumer_cursor,
)
from ...consumers.control import consumer_row, parse_cursor
from ...errors import JobsError
from ...redaction import redact
from ...terminal import printable, printable_json
from ..progress import OpenProgress, follow_job

__all__ = ["Command"]

_VERBS = ("run", "pause", "resume", "set_cursor")


@dataclass(frozen=True, slots=True)
class _RunRow:
    """A consumer row in the shape :class:`OpenProgress` reads."""

    state: str
    rows_done: int
    pages_done: int
    total: None = None


class Command(BaseCommand):
    """List, show, run, pause or resume stream consumers."""

    help = (
        "Show the declared stream consumers, or one (NAME); run one now "
        "(NAME --run), pause or resume it, or set its cursor while paused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """``NAME``, ``--run``, ``--pause``, ``--resume``, ``--set-cursor``, ``--no-follow``."""
        parser.add_argument("name", nargs="?", help="the consumer")
        verbs = parser.add_mutually_exclusive_group()
        verbs.add_argument("--run", action="store_true", help="queue a run now")
        verbs.add_argument("--pause", action="store_true", help="pause it")
        verbs.add_argument("--resume", action="store_true", help="resume it")
        verbs.add_argument(
            "--set-cursor", metavar="JSON", help="set the cursor (paused or halted)"
        )
        parser.add_argument(
            "--no-follow",
            action="store_true",
            help="with --run: queue and return, without following the run",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch on the options; refusals become CommandError (exit 1)."""
        verb = next((v for v in _VERBS if options[v] not in (None, False)), None)
        if verb is not None and not options["name"]:
            raise CommandError(f"--{verb.replace('_', '-')} needs a consumer NAME")
        if options["no_follow"] and verb != "run":
            raise CommandError("--no-follow is for --run")
        try:
            if options["name"] is None:
                self._list()
            elif verb is None:
                self._say(_describe(consumer_row(options["name"])))
            else:
                self._act(verb, options)
        except JobsError as error:
            # The message may quote a name given on the command line.
            raise CommandError(printable(error.render())) from error

    def _say(self, text: str) -> None:
        self.stdout.write(printable(text))

    def _list(self) -> None:
        declared = registered_consumers()
        if not declared:
            self._say("no consumer(...) is declared")
        for spec in declared:
            self._say(_describe(consumer_row(spec.name)))

    def _act(self, verb: str, options: dict[str, Any]) -> None:
        name = options["name"]
        get_consumer(name)
        if verb == "pause":
            pause_consumer(name)
            self._say(f"{name}: paused")
        elif verb == "resume":
            resume_consumer(name)
            self._say(f"{name}: resumed (the supervisor starts its next run)")
        elif verb == "set_cursor":
            set_consumer_cursor(name, parse_cursor(options["set_cursor"]))
            self._say(_describe(consumer_row(name)))
        else:
            self._run(name, options["no_follow"])

    def _run(self, name: str, no_follow: bool) -> None:
        enqueued = run_consumer(name)
        note = " (already queued)" if enqueued.deduped else ""
        self._say(f"{name}: run queued as job {enqueued.id}{note}")
        if not no_follow:
            self._follow(name, enqueued)

    def _follow(self, name: str, enqueued: Any) -> None:
        """Follow the run ``enqueued`` started until its job is done."""
        from ...models import Consumer

        def read() -> _RunRow | None:
            row = Consumer.objects.filter(name=name, run_id=enqueued.run_id).first()
            if row is None:
                return None
            return _RunRow(
                state=row.state, rows_done=row.run_items, pages_done=row.run_batches
            )

        follow_job(
            OpenProgress(self.stdout, name),
            enqueued.id,
            read,
            lambda _row, state: state == "done",
        )
        error = Consumer.objects.filter(name=name).values_list("error", flat=True)
        if error.first():
            raise CommandError(printable(f"consumer {name!r}: {error.first()}"))


def _describe(row: Any) -> str:
    text = (
        f"{row.name}: {row.state}, cursor {printable_json(redact(row.cursor))}, "
        f"{row.items_done:,} items in {row.batches_done:,} batches"
    )
    if row.last_batch_at is not None:
        text += f", last batch {row.last_batch_at.isoformat()}"
    if row.error:
        text += f", last error: {row.error}"
    return text
