"""``manage.py jobs``: look at jobs and re-drive them from a shell.

Exit code 0 only when the action happened; a refusal prints the coded error
(``X_...: cause (fix: ...)``) and exits 1. ``--json`` prints what the
operator module answered, and a refusal as ``{"error": {"code", "cause",
"fix", "meta"}}`` on stderr (still exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import operator
from ...errors import JobsError
from ...outbox import operator as outbox_operator
from ...terminal import counted, printable, printable_json, printable_tree


class Command(BaseCommand):
    """ls | count | show | retry | cancel | rm | promote | pause | resume | stats | workers | leases | tasks | run-task | outbox | outbox-discard."""

    help = "Inspect and re-drive django-ultimate-jobs jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        """One subcommand per operator verb."""
        parser.add_argument("--json", action="store_true", help="print JSON")
        verbs = parser.add_subparsers(dest="verb", required=True)
        listing = verbs.add_parser("ls", help="a page of jobs, newest first")
        for flag in ("--queue", "--name", "--tenant", "--id-prefix"):
            listing.add_argument(flag, help=f"only jobs with this {flag[2:]}")
        listing.add_argument(
            "--state", help="only jobs in this state (comma-separated: any of them)"
        )
        listing.add_argument(
            "--limit",
            type=int,
            default=operator.DEFAULT_JOB_PAGE,
            help="rows per page, at most 200",
        )
        listing.add_argument("--after", help="the next cursor a page printed")
        counting = verbs.add_parser("count", help="how many jobs match (one number)")
        for flag in ("--queue", "--name", "--tenant", "--error-code"):
            counting.add_argument(flag, help=f"only jobs with this {flag[2:]}")
        counting.add_argument(
            "--state", help="only jobs in this state (comma-separated: any of them)"
        )
        cancel = verbs.add_parser("cancel", help="cancel a live job")
        cancel.add_argument("job_id")
        cancel.add_argument("--reason", help="recorded as the job's last error")
        for verb, about in (
            ("show", "one job, with its retry schedule"),
            ("rm", "remove a job that is not running"),
            ("promote", "run a waiting job now"),
        ):
            verbs.add_parser(verb, help=about).add_argument("job_id")
        retry = verbs.add_parser("retry", help="requeue a finished job")
        retry.add_argument("job_id")
        retry.add_argument("--from-step", help="drop this step and the later ones")
        for verb in ("pause", "resume"):
            pausing = verbs.add_parser(verb, help=f"{verb} a queue, or a cron task")
            pausing.add_argument("queue", nargs="?")
            pausing.add_argument("--task", help=f"{verb} this cron task instead")
        verbs.add_parser("tasks", help="cron tasks: next run, last fire, paused")
        run_task = verbs.add_parser("run-task", help="enqueue a cron task's jobs now")
        run_task.add_argument("task")
        verbs.add_parser("stats", help="depth per queue")
        verbs.add_parser("workers", help="live worker processes")
        holding = verbs.add_parser(
            "leases", help="who holds what: locks and concurrency slots"
        )
        waiting = verbs.add_parser(
            "outbox", help="unpublished outbox messages, oldest first"
        )
        waiting.add_argument(
            "--limit", type=int, default=50, help="rows at most, 1 to 200"
        )
        discard = verbs.add_parser(
            "outbox-discard",
            help="delete an unpublished outbox message (it never becomes a job)",
        )
        discard.add_argument("message_id")
        discard.add_argument(
            "--unredacted",
            action="store_true",
            help="required: the message is printed whole, REDACT_KEYS values "
            "included, so its job can be enqueued again by hand",
        )
        holding.add_argument("--prefix", default="", help="only keys starting so")
        holding.add_argument(
            "--limit", type=int, default=200, help="rows at most, 1 to 200"
        )
        holding.add_argument(
            "--release",
            metavar="KEY",
            help="force-release a stuck lock: delete the row of KEY (lock:...) "
            "as listed; its old holder's fenced writes are still refused",
        )
        # People type the flag after the verb too (`jobs show <id> --json`).
        # SUPPRESS: a verb that is not given --json leaves the value the
        # top-level flag set, instead of resetting it to False.
        for verb_parser in verbs.choices.values():
            verb_parser.add_argument(
                "--json",
                action="store_true",
                default=argparse.SUPPRESS,
                help="print JSON",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the verb; refusals become CommandError (exit 1)."""
        verb = options["verb"]
        actions: dict[str, Callable[[], Any]] = {
            "show": lambda: operator.show(options["job_id"]),
            "retry": lambda: operator.retry(
                options["job_id"], from_step=options["from_step"]
            ),
            "ls": lambda: operator.list_jobs(
                queue=options["queue"],
                state=_names(options["state"]),
                name=options["name"],
                tenant=options["tenant"],
                id_prefix=options["id_prefix"],
                limit=options["limit"],
                after=options["after"],
            ),
            "count": lambda: operator.count(
                states=_names(options["state"]),
                queue=options["queue"],
                name=options["name"],
                tenant=options["tenant"],
                error_code=options["error_code"],
            ),
            "cancel": lambda: operator.cancel(
                options["job_id"], reason=options["reason"]
            ),
            "rm": lambda: operator.remove(options["job_id"]),
            "promote": lambda: operator.promote(options["job_id"]),
            "pause": lambda: _pause_or_resume(options, pause=True),
            "resume": lambda: _pause_or_resume(options, pause=False),
            "tasks": operator.tasks,
            "run-task": lambda: operator.run_task(options["task"]),
            "stats": operator.stats,
            "workers": operator.workers,
            "leases": lambda: (
                operator.release_lock(options["release"])
                if options["release"] is not None
                else operator.leases(prefix=options["prefix"], limit=options["limit"])
            ),
            "outbox": lambda: outbox_operator.unpublished(options["limit"]),
            "outbox-discard": lambda: _discard(options),
        }
        try:
            answer = actions[verb]()
        except JobsError as error:
            # The message quotes stored text (step names...): escaped too.
            if options["json"]:
                self.stderr.write(_error_json(error))
                raise JsonRefusal(printable(error.render())) from error
            raise CommandError(printable(error.render())) from error
        if options["json"]:
            self.stdout.write(json.dumps(answer, indent=2, sort_keys=True, default=str))
            if verb == "outbox-discard":
                self.stderr.write(_UNREDACTED)
        else:
            kind = "tasks" if options.get("task") else "queues"
            self.stdout.write(_human(verb, answer, kind=kind))
        if verb == "leases" and isinstance(answer, list):
            if len(answer) == options["limit"]:
                # On stderr too with --json, which keeps stdout a plain list.
                (self.stderr if options["json"] else self.stdout).write(
                    f"(the first {counted(options['limit'], 'row')} by key: more may be "
                    "stored; narrow them with --prefix)"
                )

    def execute(self, *args: Any, **options: Any) -> Any:
        """Run; from a shell, a ``--json`` refusal leaves only its JSON on stderr."""
        try:
            return super().execute(*args, **options)
        except JsonRefusal as refusal:
            # Django would print "CommandError: ..." after the JSON;
            # call_command callers get the exception as usual.
            if getattr(self, "_called_from_command_line", False):
                sys.exit(refusal.returncode)
            raise


class JsonRefusal(CommandError):
    """A refusal whose JSON form was already written to stderr (``--json``)."""


def _error_json(error: JobsError) -> str:
    body = {"code": error.code, "cause": error.cause, "fix": error.fix}
    return json.dumps({"error": {**body, "meta": error.meta}}, default=str)


def _names(value: str | None) -> list[str] | None:
    """``"a, b"`` -> ``["a", "b"]``; not given is ``None`` (any).

    An empty ``--state ""`` is an empty list, which the operator refuses
    rather than reading it as "any state".
    """
    if value is None:
        return None
    if not value.strip():
        return []
    return [name.strip() for name in value.split(",")]


_UNREDACTED = "the message's input is printed UNREDACTED (REDACT_KEYS values included)"


def _discard(options: dict[str, Any]) -> dict[str, Any]:
    # The full print is the point (the job can be enqueued again by hand),
    # so it is asked for by name, as the change permission is in the admin.
    if not options["unredacted"]:
        raise CommandError(
            "outbox-discard deletes the message and prints its input whole, "
            "REDACT_KEYS values included: pass --unredacted to do both"
        )
    return outbox_operator.discard(options["message_id"])


def _pause_or_resume(options: dict[str, Any], *, pause: bool) -> Any:
    queue, task = options["queue"], options["task"]
    if (queue is None) == (task is None):
        raise CommandError("name a queue, or a cron task with --task NAME (not both)")
    if task is not None:
        return operator.pause_task(task) if pause else operator.resume_task(task)
    return operator.pause_queue(queue) if pause else operator.resume_queue(queue)


def _human(verb: str, answer: Any, *, kind: str = "queues") -> str:
    """The answer as lines for a terminal: every stored string escaped.

    ``safe`` is the answer with each string :func:`printable`; job data
    (input, progress, result) is printed as JSON from the answer itself
    (already redacted by the operator), then escaped as one line.
    """
    safe = printable_tree(answer)
    if verb == "ls":
        return _page(safe)
    if verb in ("show", "retry", "cancel", "promote"):
        return _human_job(verb, safe, answer)
    if verb == "count":
        return str(answer)
    if verb == "rm":
        return f"removed {safe['id']}"
    if verb in ("pause", "resume"):
        names = ", ".join(p["name"] for p in safe) or "none"
        return f"paused {kind}: {names}"
    if verb == "outbox-discard":
        return (
            f"discarded {safe['id']} ({safe['name']} on queue {safe['queue']})\n"
            f"input, UNREDACTED (REDACT_KEYS values included): {printable_json(answer['input'])}"
        )
    if verb == "run-task":
        return "\n".join(
            f"{e['id']}{' (deduped)' if e['deduped'] else ''}" for e in safe
        )
    formatters: dict[str, Callable[[Any], str]] = {
        "tasks": _human_tasks,
        "leases": _human_leases,
        "outbox": _human_outbox,
        "stats": _human_stats,
        "workers": _human_workers,
    }
    return formatters[verb](safe)


def _human_job(verb: str, safe: dict[str, Any], answer: dict[str, Any]) -> str:
    lines = [f"{safe['name']} {safe['id']}: {safe['state']}"]
    lines.append(
        f"  queue={safe['queue']} attempt={safe['attempt']}/"
        f"{safe['max_attempts']} run_at={safe['run_at']}"
    )
    if safe.get("last_error"):
        # A job that later succeeded keeps its old error as history.
        label = "an earlier error" if safe["state"] == "done" else "last error"
        lines.append(f"  {label}: {safe['last_error']}")
    if verb == "show":
        if safe.get("retry_delays_ms"):
            lines.append(f"  retries left, ms: {safe['retry_delays_ms']}")
        # Job data as the operator answered it: REDACT_KEYS values redacted.
        for key in ("input", "progress", "result"):
            if answer.get(key) is not None:
                lines.append(f"  {key}: {printable_json(answer[key])}")
    for step in safe.get("steps", []):
        took = "" if step["duration_ms"] is None else f" {step['duration_ms']} ms"
        error = f" error: {step['error']}" if step["error"] else ""
        lines.append(f"  step {step['name']}: {step['status']}{took}{error}")
    return "\n".join(lines)


def _human_tasks(answer: list[dict[str, Any]]) -> str:
    return (
        "\n".join(
            f"{t['name']} cron={t['cron']!r} tz={t['tz']} next={t['next_run']} "
            f"last={t['last_occurrence'] or 'never'}"
            f"{' PAUSED' if t['paused'] else ''}"
            f"{'' if t['declared'] else ' (no longer declared)'}"
            for t in answer
        )
        or "no cron tasks"
    )


def _human_leases(answer: list[dict[str, Any]] | dict[str, Any]) -> str:
    if isinstance(answer, dict):
        return "\n".join(
            f"released {answer['key']} #{row['slot']} "
            f"holder={row['holder']} "
            f"token={row['token']}{' (had lapsed)' if row['expired'] else ''}: "
            "the lock is free; its old holder loses it at its next renewal, "
            "and its fenced writes are refused once the next holder writes"
            for row in answer["released"]
        )
    lines = [
        f"{lease['key']} #{lease['slot']} ({lease['kind']}) "
        f"holder={lease['holder']} token={lease['token']} "
        f"expires={lease['expires_at']}{' EXPIRED' if lease['expired'] else ''}"
        for lease in answer
    ]
    return "\n".join(lines or ["no leases"])


def _human_outbox(answer: dict[str, Any]) -> str:
    lines = [
        f"{m['id']}  {m['status']:<12} {m['queue']:<12} {m['name']}"
        f"  staged {m['staged_at']}  attempts {m['attempts']}"
        + (f"  {m['last_error']}" if m["last_error"] else "")
        for m in answer["messages"]
    ]
    lines.append(f"{answer['pending']} unpublished")
    return "\n".join(lines)


def _human_stats(answer: dict[str, Any]) -> str:
    rows = [
        f"{q['queue']:<20} ready={q['ready']} delayed={q['delayed']} "
        f"running={q['running']} suspended={q['suspended']} failed={q['failed']} "
        f"dead={q['dead']}"
        for q in answer["queues"]
    ]
    return "\n".join(rows) or "no jobs"


def _human_workers(answer: list[dict[str, Any]]) -> str:
    return (
        "\n".join(
            f"{w['id']} host={w['host']} pid={w['pid']} queues={','.join(w['queues'])} "
            f"in_flight={len(w['in_flight'])}"
            for w in answer
        )
        or "no workers"
    )


def _page(answer: dict[str, Any]) -> str:
    lines = [
        f"{job['id']}  {job['state']:<9} {job['queue']:<12} {job['name']}"
        f"  attempt {job['attempt']}/{job['max_attempts']}"
        + (
            f"  {job['last_error']}"
            if job["last_error"] and job["state"] != "done"
            else ""
        )
        for job in answer["jobs"]
    ]
    if not lines:
        lines.append("no jobs")
    if answer["next"]:
        lines.append(f"next page: --after {answer['next']}")
    return "\n".join(lines)
