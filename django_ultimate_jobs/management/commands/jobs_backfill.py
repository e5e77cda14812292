"""``manage.py jobs_backfill``: list, dry-run and run the declared backfills.

``<name>`` alone is a dry run (rows, pages, time at the declared rate);
``--write`` gates it (done needs ``--force``, a paused one is resumed in the
admin, its ``requires=`` must be done) and enqueues its pass, which a worker
runs; the command then follows the ``Backfill`` row until the pass ends: a
progress bar on a terminal, a plain line every few seconds otherwise.
``--all`` does the same for every backfill not done, in dependency order;
one refused is printed and the others go on. A refusal prints the coded
error and exits 1. Only the pass the command queued is followed (by its
run id), never the outcome of an earlier one.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backfills import (
    enqueue_backfill,
    get_backfill,
    plan_backfill,
    registered_backfills,
    requirement_order,
    state_of,
    unmet_requirements,
)
from ...drivers.base import Enqueued
from ...errors import BackfillRequiresPending, JobsError
from ...terminal import counted, printable
from ..progress import Progress, duration, follow, pages

PENDING_STATES = ("pending", "failed", "paused")
"""What ``--pending`` lists: a pass in flight is not an alarm."""


class Command(BaseCommand):
    """List, dry-run or run backfills."""

    help = (
        "Show the declared backfills (--list, --pending), dry-run one (NAME), "
        "or run it (NAME --write) or all not done (--all --write)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """``NAME``, ``--list``, ``--pending``, ``--all``, ``--write``, ``--force``, ``--no-follow``."""
        parser.add_argument("name", nargs="?", help="the backfill to dry-run or run")
        parser.add_argument(
            "--list",
            action="store_true",
            help="every declared backfill and its progress",
        )
        parser.add_argument(
            "--pending",
            action="store_true",
            help="the backfills not done; exits 1 if there is any",
        )
        parser.add_argument(
            "--all",
            action="store_true",
            help="every backfill not done, requirements first",
        )
        parser.add_argument(
            "--write",
            action="store_true",
            help="run it (enqueue its pass); without it, a dry run",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="run a done backfill again from its first row",
        )
        parser.add_argument(
            "--no-follow",
            action="store_true",
            help="with --write: enqueue and return, without following the progress",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch on the options; refusals become CommandError (exit 1)."""
        modes = [m for m in ("list", "pending", "all") if options[m]]
        if len(modes) + bool(options["name"]) != 1:
            raise CommandError("give one of NAME, --list, --pending or --all")
        _check_usage(options)
        try:
            if options["list"]:
                self._list(pending_only=False)
            elif options["pending"]:
                self._list(pending_only=True)
            else:
                names = [options["name"]] if options["name"] else None
                self._run(names, options)
        except JobsError as error:
            # The message may quote a name given on the command line.
            raise CommandError(printable(error.render())) from error

    # -- --list / --pending ------------------------------------------------------

    def _list(self, *, pending_only: bool) -> None:
        from ...models import Backfill

        rows = {row.name: row for row in Backfill.objects.all()}
        shown = 0
        for spec in registered_backfills():
            row = rows.get(spec.name)
            state = row.state if row is not None else "pending"
            if pending_only and state not in PENDING_STATES:
                continue
            shown += 1
            self.stdout.write(_describe(spec.name, state, row, spec.requires))
        if not registered_backfills():
            self.stdout.write("no backfill(...) is declared")
        elif pending_only and not shown:
            self.stdout.write("every backfill is done (or running)")
        if pending_only and shown:
            raise CommandError(
                f"{counted(shown, 'backfill')} not done: "
                "python manage.py jobs_backfill --all --write"
            )

    # -- NAME / --all --------------------------------------------------------------

    def _run(self, names: list[str] | None, options: dict[str, Any]) -> None:
        write, force = options["write"], options["force"]
        refused: list[str] = []
        if names is None:
            # --all: one bad backfill is refused and printed, the rest go on.
            order = self._all_in_order(refused)
            chosen = [n for n in order if force or state_of(n) != "done"]
        else:
            get_backfill(names[0])
            requirement_order(names)  # a cycle or an unknown requires= refuses now
            chosen = names
        if not chosen and not refused:
            self.stdout.write("nothing to run: every backfill is done")
            return
        if not write:
            for name in chosen:
                try:
                    self.stdout.write(_dry_run(name))
                except JobsError as error:
                    if names is not None:
                        raise
                    self._refuse(name, error, refused)
            self.stdout.write("dry run: pass --write to run it")
        else:
            started = self._enqueue_all(chosen, force, refused, together=not names)
            if not options["no_follow"]:
                self._follow_all(started, refused, together=not names)
        if refused:
            raise CommandError(
                f"{counted(len(refused), 'backfill')} refused or failed: "
                f"{', '.join(refused)}"
            )

    def _all_in_order(self, refused: list[str]) -> list[str]:
        """Every declared backfill, requirements first; one whose requirements
        cannot be ordered (a cycle, an unknown name) is refused alone."""
        order: list[str] = []
        for spec in registered_backfills():
            try:
                path = requirement_order([spec.name])
            except JobsError as error:
                self._refuse(spec.name, error, refused)
                continue
            order.extend(name for name in path if name not in order)
        return order

    def _refuse(self, name: str, error: JobsError, refused: list[str]) -> None:
        refused.append(printable(name))
        self.stderr.write(printable(f"{name}: {error.render()}"))

    def _enqueue_all(
        self, chosen: list[str], force: bool, refused: list[str], *, together: bool
    ) -> list[tuple[str, Enqueued]]:
        started: list[tuple[str, Enqueued]] = []
        for name in chosen:
            try:
                if together:
                    # The earlier ones are queued: their passes run first,
                    # and this pass waits for them. One outside the run is
                    # not coming, so it is refused.
                    queued = {n for n, _ in started}
                    unmet = unmet_requirements(get_backfill(name))
                    missing = [u for u in unmet if u not in queued]
                    if missing:
                        raise BackfillRequiresPending(
                            f"backfill {name!r} requires {', '.join(missing)}, "
                            "which is not done and not part of this run",
                            meta={"backfill": name, "unmet": missing},
                        )
                enqueued = enqueue_backfill(
                    name, force=force, check_requirements=not together
                )
            except JobsError as error:
                if not together:
                    raise
                self._refuse(name, error, refused)
                continue
            note = " (already queued)" if enqueued.deduped else ""
            self.stdout.write(
                f"{printable(name)}: pass queued as job {enqueued.id}{note}"
            )
            started.append((name, enqueued))
        return started

    def _follow_all(
        self, started: list[tuple[str, Enqueued]], refused: list[str], *, together: bool
    ) -> None:
        for name, enqueued in started:
            try:
                self._follow(name, enqueued)
            except CommandError as error:
                if not together:
                    raise
                refused.append(printable(name))
                self.stderr.write(str(error))

    def _follow(self, name: str, enqueued: Enqueued) -> None:
        """Follow the pass ``enqueued`` started until it ends; only its outcome counts."""
        from ...models import Backfill

        follow(
            Progress(self.stdout, name),
            enqueued,
            lambda: Backfill.objects.filter(name=name).first(),
            what=f"backfill {name!r}",
            listing="python manage.py jobs_backfill --list",
            resume="resume it from the admin's Backfills page (or "
            "resume_backfill()), then follow it: python manage.py jobs_backfill "
            f"{printable(name)} --write",
        )


def _check_usage(options: dict[str, Any]) -> None:
    """Refuse options that would be silently ignored (exit 1, nothing done)."""
    if options["write"] and (options["list"] or options["pending"]):
        raise CommandError("--write runs NAME or --all; --list and --pending only show")
    for needs_write in ("force", "no_follow"):
        if options[needs_write] and not options["write"]:
            flag = "--" + needs_write.replace("_", "-")
            raise CommandError(
                f"{flag} is for --write; without --write it is a dry run"
            )


def _describe(name: str, state: str, row: Any, requires: tuple[str, ...]) -> str:
    # The row's error is stored text (an exception message): escaped.
    text = printable(f"{name}: {state}")
    if row is not None:
        total = "?" if row.total is None else f"{row.total:,}"
        text += f", {row.rows_done:,}/{total} rows, {pages(row.pages_done)}"
        if row.finished_at is not None:
            text += f", finished {row.finished_at.isoformat()}"
        if row.error:
            text += f", last error: {printable(row.error)}"
    if requires:
        text += printable(f" (requires {', '.join(requires)})")
    return text


def _dry_run(name: str) -> str:
    plan = plan_backfill(name)
    spec = get_backfill(name)
    text = (
        # "Up to": a failed or paused pass resumes after its cursor.
        f"{printable(name)} ({plan.state}): would handle up to "
        f"{counted(plan.rows, 'row', grouped=True)} in "
        f"{pages(plan.pages)} of {spec.batch:,} at {spec.rate:g} pages/s "
        f"(at least {duration(plan.seconds)})"
    )
    if plan.unmet:
        text += printable(f"; waits for {', '.join(plan.unmet)} (not done)")
    return text


__all__ = ["Command", "Progress"]
