"""``manage.py jobs_subject``: list subjects, export or erase one person's data.

- ``list``: each declared subject, its tables and what an erase does to
  them, then every personal-data field no subject erases (exit 1 if any);
- ``export NAME KEY [--storage ALIAS] [--by WHO]``: queue an export and
  follow it; prints the archive's name in the storage;
- ``erase NAME KEY``: a dry run (rows per table, and how many an erase
  would change); with ``--write --by WHO`` it queues the erase and follows
  it, then prints what was erased per model and field;
- ``show REQUEST_ID``: where a request stands.

A worker does the work, never the command. Every line holds stored or
given text (names, archives, errors) and is printed through
:func:`~django_ultimate_jobs.terminal.printable`. Following shows a progress
bar on a terminal (a plain line every few seconds otherwise); ``--no-follow``
returns once the request is queued. A refusal prints the coded error and
exits 1, with nothing written.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...errors import JobsError
from ...subjects import (
    erase_subject,
    export_subject,
    personal_data_problems,
    plan_subject,
    registered_subjects,
)
from ...subjects.errors import SubjectArgumentInvalid
from ...terminal import counted, printable
from ..progress import Progress, follow_job

__all__ = ["Command"]


class Command(BaseCommand):
    """List subjects; export or erase a subject's data."""

    help = (
        "List the declared data subjects (list), export one person's data "
        "(export NAME KEY), dry-run or run an erase (erase NAME KEY [--write "
        "--by WHO]), or show a request (show ID)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """The four actions, each with its own arguments."""
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("list", help="the subjects and any coverage gap")
        export = actions.add_parser("export", help="queue an export and follow it")
        erase = actions.add_parser("erase", help="dry-run, or run with --write")
        show = actions.add_parser("show", help="where a request stands")
        show.add_argument("request", help="the request id")
        for sub in (export, erase):
            sub.add_argument("subject", help="the subject's declared name")
            sub.add_argument("key", help="the subject's key (e.g. the customer's id)")
            sub.add_argument("--by", default="", help="who asked (the audit's)")
            sub.add_argument(
                "--no-follow",
                action="store_true",
                help="return once queued, without following the progress",
            )
        export.add_argument(
            "--storage", default="", help="a STORAGES alias (default: the subject's)"
        )
        erase.add_argument(
            "--write", action="store_true", help="erase; without it, a dry run"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch on the action; refusals become CommandError (exit 1)."""
        try:
            getattr(self, "_" + options["action"])(options)
        except JobsError as error:
            # The message may quote a name or a key given on the command line.
            raise CommandError(printable(error.render())) from error

    def _say(self, text: str) -> None:
        self.stdout.write(printable(text))

    def _list(self, options: dict[str, Any]) -> None:
        subjects = registered_subjects()
        if not subjects:
            self._say("no subject(...) is declared")
        for declared in subjects:
            self._say(f"{declared.name}:")
            for spec in declared.tables:
                self._say(f"  {spec.label} by {spec.by}: {spec.erase.describe()}")
        problems = personal_data_problems()
        for problem in problems:
            self.stderr.write(printable(problem.render()))
        if problems:
            raise CommandError(
                f"{counted(len(problems), 'personal-data gap')}: python manage.py check "
                "lists them too"
            )

    def _export(self, options: dict[str, Any]) -> None:
        requested = export_subject(
            options["subject"],
            options["key"],
            requested_by=options["by"],
            storage=options["storage"],
        )
        row = self._follow("export", requested, options)
        if row is not None:
            self._say(f"archive: {row.archive}")

    def _erase(self, options: dict[str, Any]) -> None:
        if not options["write"]:
            for plan in plan_subject(options["subject"], options["key"]):
                self._say(
                    f"{plan.model} by {plan.by}: {counted(plan.rows, 'row', grouped=True)}, "
                    f"{plan.to_treat:,} to change ({plan.erase})"
                )
            self._say("dry run: pass --write --by WHO to erase")
            return
        requested = erase_subject(
            options["subject"], options["key"], requested_by=options["by"]
        )
        row = self._follow("erase", requested, options)
        if row is not None:
            for entry in row.summary or []:
                self._say(
                    f"  {entry['model']}.{entry['field']}: {entry['policy']}, "
                    f"{counted(entry['rows'], 'row', grouped=True)}"
                )

    def _show(self, options: dict[str, Any]) -> None:
        from ...models import SubjectRequest

        try:
            request_id = UUID(options["request"])
        except ValueError:
            raise SubjectArgumentInvalid(
                "a request id is a UUID", meta={"argument": "request"}
            ) from None
        row = SubjectRequest.objects.filter(id=request_id).first()
        if row is None:
            raise SubjectArgumentInvalid(
                f"no subject request {request_id} is stored",
                meta={"argument": "request"},
            )
        self._say(_describe(row))

    def _follow(self, kind: str, requested: Any, options: dict[str, Any]) -> Any:
        from ...models import SubjectRequest

        note = " (already queued)" if requested.deduped else ""
        self._say(
            f"{kind} request {requested.request_id} queued as job "
            f"{requested.job_id}{note}"
        )
        if options["no_follow"]:
            return None

        def read() -> Any:
            return SubjectRequest.objects.filter(id=requested.request_id).first()

        row = follow_job(
            Progress(self.stdout, f"{kind} {options['subject']}"),
            requested.job_id,
            read,
            lambda row, _state: row.state in ("done", "failed"),
        )
        if row.state == "failed":
            raise CommandError(printable(f"the {kind} failed: {row.error}"))
        return row


def _describe(row: Any) -> str:
    total = "?" if row.total is None else f"{row.total:,}"
    text = (
        f"{row.kind} of {row.subject}: {row.state}, {row.rows_done:,}/{total} rows, "
        f"requested by {row.requested_by or '-'}"
    )
    if row.archive:
        text += f", archive {row.archive}"
    if row.error:
        text += f", last error: {row.error}"
    return text
