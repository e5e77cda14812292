"""Every admin page and every command that shows job data, over hostile data.

Two tables: ``ADMIN_PAGES`` (one row per admin URL name of the app) and
``COMMANDS`` (the app's management commands, each verb or mode at least
once). Each row is run against the data of ``tests/support/hostile.py``:

- no secret (a ``REDACT_KEYS`` value in input, result, progress, a step's
  output, an event payload, an outbox message, the cursor of a backfill, a
  reindex, an export, an import or a consumer, an export's params, a
  subject request's summary, a webhook delivery's body) reaches a page or a
  terminal in clear, and a row that shows such data shows it, as
  ``[redacted]``;
- a command's output holds no control character but its own line breaks: a
  stored error, step name, queue, key... is printed escaped (``\\x1b``,
  ``\\n``), so it can neither drive the terminal nor forge a line. ``--json``
  prints the stored text as it is (JSON escapes it).

A page or a command the app adds fails ``test_every_admin_url_has_a_row`` or
``test_every_command_has_a_row`` until it gets a row here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command, get_commands
from django.db.models import JSONField
from django.urls import URLPattern, URLResolver, reverse

from django_ultimate_jobs import operator
from django_ultimate_jobs.management.commands.jobs import Command as JobsCommand
from django_ultimate_jobs.management.commands.jobs_backfill import (
    Command as BackfillCommand,
)
from django_ultimate_jobs.models import OutboxMessage
from django_ultimate_jobs.outbox import operator as outbox_operator
from django_ultimate_jobs.redaction import REDACTED
from tests.support.hostile import (
    ARTIFACTS,
    BROKEN,
    ESCAPED,
    ESCAPED_JSON,
    FILL,
    FORGED,
    HOSTILE,
    PAID,
    PREFIX,
    REINDEX,
    SECRETS,
    STREAM,
    VISIBLE,
    Seeded,
    raw_control_characters,
    seed,
    unseed,
)

pytestmark = pytest.mark.postgres

JOB_DATA = ("input", "result", "progress", "step_output", "event_payload")


@pytest.fixture
def seeded(pg_driver):
    data = seed(pg_driver)
    yield data
    unseed()


def _leaks(text: str) -> list[str]:
    return [where for where, secret in SECRETS.items() if secret in text]


def _shown(text: str, shows: tuple[str, ...]) -> list[str]:
    """Which of ``shows`` the text leaves out (it must show each, redacted)."""
    missing = [where for where in shows if VISIBLE[where] not in text]
    if shows and REDACTED not in text:
        missing.append(REDACTED)
    return missing


# -- the admin ---------------------------------------------------------------------

Request = tuple[str, str, dict[str, Any]]


def get(name: str, *args: Any, **query: Any) -> Request:
    return ("get", reverse(f"admin:{name}", args=[str(a) for a in args]), query)


def post(name: str, data: dict[str, Any], *args: Any) -> Request:
    return ("post", reverse(f"admin:{name}", args=[str(a) for a in args]), data)


@dataclass(frozen=True)
class Page:
    """What to request of one admin URL name, and the job data it shows."""

    requests: Callable[[Seeded], list[Request]]
    shows: tuple[str, ...] = ()


def _model_pages(model: str, some_id: Callable[[Seeded], Any], **shows: Any) -> dict:
    """The five URLs Django gives every registered model."""
    prefix = f"ultimate_jobs_{model}"
    return {
        f"{prefix}_changelist": Page(lambda s: [get(f"{prefix}_changelist")]),
        f"{prefix}_add": Page(lambda s: [get(f"{prefix}_add")]),
        f"{prefix}_change": Page(
            lambda s: [get(f"{prefix}_change", some_id(s))],
            shows=shows.get("change", ()),
        ),
        f"{prefix}_history": Page(lambda s: [get(f"{prefix}_history", some_id(s))]),
        f"{prefix}_delete": Page(lambda s: [get(f"{prefix}_delete", some_id(s))]),
    }


ADMIN_PAGES: dict[str, Page] = {
    **_model_pages("job", lambda s: s.leaky, change=JOB_DATA),
    # The list, its actions' confirmation, and the broken job's page.
    "ultimate_jobs_job_changelist": Page(
        lambda s: [
            get("ultimate_jobs_job_changelist"),
            post(
                "ultimate_jobs_job_changelist",
                {"action": "retry_selected", "_selected_action": [s.leaky, s.broken]},
            ),
        ]
    ),
    "ultimate_jobs_job_dead_letter": Page(
        lambda s: [
            get("ultimate_jobs_job_dead_letter"),
            post(
                "ultimate_jobs_job_dead_letter",
                {"name": BROKEN, "code": "RuntimeError"},
            ),
        ]
    ),
    "ultimate_jobs_job_operate": Page(
        lambda s: [
            get("ultimate_jobs_job_operate", s.leaky, "retry"),
            get("ultimate_jobs_job_operate", s.broken, "remove"),
        ]
    ),
    **{
        f"ultimate_jobs_job_{page}": Page(
            lambda s, page=page: [get(f"ultimate_jobs_job_{page}")]
        )
        for page in ("queues", "cron_tasks", "workers", "leases", "dashboard")
    },
    # The event bus, all events and one name's: payloads redacted.
    "ultimate_jobs_job_events": Page(
        lambda s: [
            get("ultimate_jobs_job_events"),
            ("get", reverse("admin:ultimate_jobs_job_events"), {"name": PAID}),
        ],
        shows=("event_payload",),
    ),
    **_model_pages("outboxmessage", lambda s: s.outbox, change=("outbox_input",)),
    **_model_pages("backfill", lambda s: FILL, change=("backfill_cursor",)),
    # The ledger holds no job data; its pages are listed so a new one is seen.
    **_model_pages("ledgerposting", lambda s: 1),
    **_model_pages("ledgerline", lambda s: 1),
    "ultimate_jobs_ledgerline_balances": Page(
        lambda s: [get("ultimate_jobs_ledgerline_balances")]
    ),
    "app_list": Page(
        lambda s: [("get", reverse("admin:app_list", args=["ultimate_jobs"]), {})]
    ),
    # Consumers, subject requests, passes, webhooks: each list, its action's
    # confirmation where it takes one, and a page per row.
    **_model_pages("consumer", lambda s: STREAM, change=("consumer_cursor",)),
    "ultimate_jobs_consumer_changelist": Page(
        lambda s: [
            get("ultimate_jobs_consumer_changelist"),
            post(
                "ultimate_jobs_consumer_changelist",
                {"action": "resume_selected", "_selected_action": [STREAM]},
            ),
        ]
    ),
    **_model_pages(
        "subjectrequest",
        lambda s: s.subject_request,
        change=("subject_summary",),
    ),
    **_model_pages("erasurerecord", lambda s: s.erasure),
    **_model_pages("reindex", lambda s: REINDEX, change=("pass_cursor",)),
    **_model_pages(
        "export", lambda s: s.export, change=("pass_cursor", "export_params")
    ),
    "ultimate_jobs_export_changelist": Page(
        lambda s: [
            get("ultimate_jobs_export_changelist"),
            post(
                "ultimate_jobs_export_changelist",
                {"action": "resume_selected", "_selected_action": [s.export]},
            ),
        ]
    ),
    **_model_pages("import", lambda s: s.import_, change=("pass_cursor",)),
    **_model_pages("webhookendpoint", lambda s: s.endpoint),
    "ultimate_jobs_webhookendpoint_changelist": Page(
        lambda s: [
            get("ultimate_jobs_webhookendpoint_changelist"),
            post(
                "ultimate_jobs_webhookendpoint_changelist",
                {"action": "enable_selected", "_selected_action": [s.endpoint]},
            ),
        ]
    ),
    **{
        f"ultimate_jobs_webhookendpoint_{verb}": Page(
            lambda s, verb=verb: [
                get(f"ultimate_jobs_webhookendpoint_{verb}", s.endpoint)
            ]
        )
        for verb in ("rotate", "test")
    },
    **_model_pages("webhookdelivery", lambda s: s.delivery, change=("delivery_body",)),
    "ultimate_jobs_webhookdelivery_changelist": Page(
        lambda s: [
            get("ultimate_jobs_webhookdelivery_changelist"),
            post(
                "ultimate_jobs_webhookdelivery_changelist",
                {"action": "replay_selected", "_selected_action": [s.delivery]},
            ),
        ]
    ),
    **_model_pages("inbounddelivery", lambda s: s.inbound),
}


def _admin_url_names() -> set[str]:
    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern) and pattern.name:
                yield pattern.name, str(pattern.pattern)

    return {
        name
        for name, route in walk(admin.site.get_urls())
        if name.startswith("ultimate_jobs_") or "ultimate_jobs" in route
    }


def test_every_admin_url_has_a_row():
    """A page the app adds is checked once it has a row in ADMIN_PAGES."""
    assert _admin_url_names() == set(ADMIN_PAGES)


@pytest.mark.parametrize("name", sorted(ADMIN_PAGES))
def test_no_admin_page_shows_a_secret(admin_client, seeded, name):
    """Each page, as a superuser: no secret in clear; the job data it shows
    is there, redacted."""
    page = ADMIN_PAGES[name]
    for method, url, data in page.requests(seeded):
        response = getattr(admin_client, method)(url, data, follow=True)
        assert response.status_code in (200, 403), (url, response.status_code)
        text = response.content.decode()
        assert _leaks(text) == [], url
        if response.status_code == 200 and page.shows:
            assert _shown(text, page.shows) == [], url


def test_no_model_page_shows_a_json_column_as_stored(rf, admin_user):
    """Each model page Django renders from fields shows its JSON columns
    through redact() only (the job page renders operator.show)."""
    request = rf.get("/")
    request.user = admin_user
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "ultimate_jobs":
            continue
        if type(model_admin).change_view is not admin.ModelAdmin.change_view:
            continue  # its own page, in ADMIN_PAGES
        columns = {
            f.name for f in model._meta.concrete_fields if isinstance(f, JSONField)
        }
        shown = set(model_admin.get_fields(request, None))
        assert not columns & shown, model


# -- the commands ------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command line, what it shows, and what it must print."""

    argv: Callable[[Seeded], list[str]]
    shows: tuple[str, ...] = ()
    """Job data it shows (redacted)."""
    stored_text: bool = True
    """Whether it prints a stored hostile text (escaped)."""
    refuses: bool = False
    """Exits 1 (a CommandError)."""
    unredacted: bool = False
    """A deliberate full print (``outbox-discard --unredacted``)."""
    follow: bool = False
    """Follow the backfill's failed pass as ``--write`` does after queueing it."""


RETENTION = "ultimate_jobs.retention"

COMMANDS: dict[str, Command] = {
    "jobs ls": Command(lambda s: ["jobs", "ls"]),
    "jobs ls --json": Command(lambda s: ["jobs", "--json", "ls"]),
    "jobs count": Command(lambda s: ["jobs", "count"], stored_text=False),
    "jobs show (done, steps)": Command(
        lambda s: ["jobs", "show", str(s.leaky)], shows=("input", "result", "progress")
    ),
    "jobs show --json": Command(
        lambda s: ["jobs", "--json", "show", str(s.leaky)], shows=JOB_DATA
    ),
    "jobs show (dead)": Command(
        lambda s: ["jobs", "show", str(s.broken)], shows=("input",)
    ),
    "jobs show (a hostile id)": Command(
        lambda s: ["jobs", "show", HOSTILE], stored_text=False, refuses=True
    ),
    "jobs retry": Command(lambda s: ["jobs", "retry", str(s.broken)]),
    "jobs retry --json": Command(
        lambda s: ["jobs", "--json", "retry", str(s.leaky)],
        shows=("input", "result", "progress"),
    ),
    "jobs retry --from-step (unknown)": Command(
        lambda s: ["jobs", "retry", str(s.leaky), "--from-step", "nope"], refuses=True
    ),
    "jobs cancel --reason": Command(
        lambda s: ["jobs", "cancel", str(s.ready), "--reason", f"why {HOSTILE}"]
    ),
    "jobs promote": Command(lambda s: ["jobs", "promote", str(s.delayed)]),
    "jobs rm": Command(lambda s: ["jobs", "rm", str(s.ready)], stored_text=False),
    "jobs pause": Command(lambda s: ["jobs", "pause", "default"]),
    "jobs resume": Command(lambda s: ["jobs", "resume", "default"]),
    "jobs pause --task": Command(lambda s: ["jobs", "pause", "--task", RETENTION]),
    "jobs resume --task": Command(lambda s: ["jobs", "resume", "--task", RETENTION]),
    "jobs tasks": Command(lambda s: ["jobs", "tasks"]),
    "jobs run-task": Command(
        lambda s: ["jobs", "run-task", RETENTION], stored_text=False
    ),
    "jobs stats": Command(lambda s: ["jobs", "stats"]),
    "jobs workers": Command(lambda s: ["jobs", "workers"]),
    "jobs leases": Command(lambda s: ["jobs", "leases"]),
    "jobs leases --release": Command(
        lambda s: ["jobs", "leases", "--release", s.lease_key]
    ),
    "jobs outbox": Command(lambda s: ["jobs", "outbox"]),
    "jobs outbox --json": Command(
        lambda s: ["jobs", "--json", "outbox"], shows=("outbox_input",)
    ),
    "jobs outbox-discard (no flag)": Command(
        lambda s: ["jobs", "outbox-discard", str(s.outbox)],
        stored_text=False,
        refuses=True,
    ),
    "jobs outbox-discard --unredacted": Command(
        lambda s: ["jobs", "outbox-discard", str(s.outbox), "--unredacted"],
        unredacted=True,
    ),
    "jobs_backfill --list": Command(lambda s: ["jobs_backfill", "--list"]),
    "jobs_backfill --pending": Command(
        lambda s: ["jobs_backfill", "--pending"], refuses=True
    ),
    "jobs_backfill NAME": Command(lambda s: ["jobs_backfill", FILL], stored_text=False),
    "jobs_backfill --all": Command(
        lambda s: ["jobs_backfill", "--all"], stored_text=False
    ),
    "jobs_backfill NAME (a hostile name)": Command(
        lambda s: ["jobs_backfill", HOSTILE], stored_text=False, refuses=True
    ),
    "jobs_backfill NAME --write (the follower)": Command(
        lambda s: ["jobs_backfill", FILL, "--write"], refuses=True, follow=True
    ),
    "jobs_consumer": Command(lambda s: ["jobs_consumer"], shows=("consumer_cursor",)),
    "jobs_consumer NAME": Command(
        lambda s: ["jobs_consumer", STREAM], shows=("consumer_cursor",)
    ),
    "jobs_consumer NAME --set-cursor": Command(
        lambda s: [
            "jobs_consumer",
            STREAM,
            "--set-cursor",
            json.dumps(
                {"token": SECRETS["consumer_cursor"], "at": VISIBLE["consumer_cursor"]}
            ),
        ],
        shows=("consumer_cursor",),
        stored_text=False,
    ),
    "jobs_consumer NAME --pause (halted)": Command(
        lambda s: ["jobs_consumer", STREAM, "--pause"],
        stored_text=False,
        refuses=True,
    ),
    "jobs_consumer NAME --resume": Command(
        lambda s: ["jobs_consumer", STREAM, "--resume"], stored_text=False
    ),
    "jobs_consumer NAME --run (halted)": Command(
        lambda s: ["jobs_consumer", STREAM, "--run", "--no-follow"],
        stored_text=False,
        refuses=True,
    ),
    "jobs_consumer NAME (a hostile name)": Command(
        lambda s: ["jobs_consumer", HOSTILE], stored_text=False, refuses=True
    ),
    "jobs_subject show": Command(
        lambda s: ["jobs_subject", "show", str(s.subject_request)]
    ),
    "jobs_subject show (a hostile id)": Command(
        lambda s: ["jobs_subject", "show", HOSTILE], stored_text=False, refuses=True
    ),
    "jobs_subject erase (dry run)": Command(
        lambda s: ["jobs_subject", "erase", "tests.customer", "1"], stored_text=False
    ),
    "jobs_subject erase (a hostile name)": Command(
        lambda s: ["jobs_subject", "erase", HOSTILE, "1"],
        stored_text=False,
        refuses=True,
    ),
    "jobs_subject export --no-follow": Command(
        lambda s: [
            "jobs_subject",
            "export",
            "tests.customer",
            "1",
            "--by",
            HOSTILE,
            "--no-follow",
        ],
        stored_text=False,
    ),
    "jobs_reindex --list": Command(lambda s: ["jobs_reindex", "--list"]),
    "jobs_reindex NAME": Command(
        lambda s: ["jobs_reindex", REINDEX], stored_text=False
    ),
    "jobs_reindex NAME --write --no-follow": Command(
        lambda s: ["jobs_reindex", REINDEX, "--write", "--no-follow"],
        stored_text=False,
    ),
    "jobs_reindex NAME (a hostile name)": Command(
        lambda s: ["jobs_reindex", HOSTILE], stored_text=False, refuses=True
    ),
    "jobs_export --list": Command(lambda s: ["jobs_export", "--list"]),
    "jobs_export NAME --prefix (a hostile prefix)": Command(
        lambda s: ["jobs_export", ARTIFACTS, "--prefix", HOSTILE],
        stored_text=False,
        refuses=True,
    ),
    "jobs_export NAME --prefix --write --force --no-follow": Command(
        lambda s: [
            "jobs_export",
            ARTIFACTS,
            "--prefix",
            PREFIX,
            "--write",
            "--force",
            "--no-follow",
        ],
        stored_text=False,
    ),
    "jobs_import --list": Command(lambda s: ["jobs_import", "--list"]),
    "jobs_import NAME --prefix (no manifest)": Command(
        lambda s: ["jobs_import", ARTIFACTS, "--prefix", PREFIX],
        stored_text=False,
        refuses=True,
    ),
    "jobs_import NAME --prefix (a hostile prefix)": Command(
        lambda s: ["jobs_import", ARTIFACTS, "--prefix", HOSTILE],
        stored_text=False,
        refuses=True,
    ),
}

# Commands that print no stored text and no job data.
EXEMPT = {
    "runjobs": "prints its worker id, queues and log lines (the worker's own)",
    "jobs_devdb": "prints a database URL",
    "maintain_partitions": "prints declared table and partition names",
}


def _jobs_verbs() -> set[str]:
    parser = JobsCommand().create_parser("manage.py", "jobs")
    (verbs,) = [a for a in parser._actions if a.choices and a.dest == "verb"]
    return set(verbs.choices)


class _AnyIds:
    """Stands for the seeded ids when only the shape of a row is read."""

    def __getattr__(self, name: str) -> str:
        return "00000000-0000-7000-8000-000000000000"


def _covered() -> tuple[set[str], set[str], set[str]]:
    commands, verbs, modes = set(), set(), set()
    for row in COMMANDS.values():
        argv = row.argv(_AnyIds())  # type: ignore[arg-type]
        commands.add(argv[0])
        words = [a for a in argv[1:] if a != "--json"]
        if argv[0] == "jobs":
            verbs.add(words[0])
        else:
            modes.update(a for a in words if a.startswith("--") or a == FILL)
    return commands, verbs, modes


def test_every_command_has_a_row():
    """Each command of the app, each `jobs` verb and each `jobs_backfill`
    mode is in COMMANDS (or EXEMPT, with the reason)."""
    app_commands = {
        name for name, app in get_commands().items() if app == "django_ultimate_jobs"
    }
    commands, verbs, modes = _covered()
    assert app_commands == commands | set(EXEMPT)
    assert not commands & set(EXEMPT)
    assert verbs == _jobs_verbs()
    assert {"--list", "--pending", "--all", FILL, "--write"} <= modes


@dataclass
class Ran:
    text: str
    """stdout, stderr, and the CommandError as Django prints it."""
    stdout: str
    refused: bool


def run(row: Command, seeded: Seeded) -> Ran:
    out, err = StringIO(), StringIO()
    refused = ""
    try:
        if row.follow:
            BackfillCommand(stdout=out, stderr=err)._follow(FILL, seeded.fill)
        else:
            call_command(*row.argv(seeded), stdout=out, stderr=err)
    except CommandError as error:
        refused = f"CommandError: {error}\n"
    text = out.getvalue() + err.getvalue() + refused
    return Ran(text=text, stdout=out.getvalue(), refused=bool(refused))


def _json(row: Command, seeded: Seeded) -> bool:
    return "--json" in row.argv(seeded)


@pytest.mark.parametrize("label", sorted(COMMANDS))
def test_no_command_prints_a_secret(seeded, label):
    """No secret in clear; the job data a command shows is there, redacted.
    ``outbox-discard --unredacted`` prints the message whole, and says so."""
    row = COMMANDS[label]
    ran = run(row, seeded)
    assert ran.refused == row.refuses, ran.text
    if row.unredacted:
        assert SECRETS["outbox_input"] in ran.text
        assert "unredacted" in ran.text.lower()
        assert not OutboxMessage.objects.filter(id=seeded.outbox).exists()
        return
    assert _leaks(ran.text) == []
    assert _shown(ran.text, row.shows) == []


@pytest.mark.parametrize(
    "label", sorted(label for label, row in COMMANDS.items() if "--json" not in label)
)
def test_no_command_prints_a_control_character(seeded, label):
    """Stored text is printed escaped: no raw escape reaches the terminal and
    no stored newline starts a line of its own."""
    row = COMMANDS[label]
    ran = run(row, seeded)
    assert raw_control_characters(ran.text) == [], ran.text
    assert not [line for line in ran.text.splitlines() if line.startswith(FORGED)]
    if row.stored_text:
        assert ESCAPED in ran.text or ESCAPED_JSON in ran.text


@pytest.mark.parametrize(
    "label", sorted(label for label in COMMANDS if "--json" in label)
)
def test_json_output_keeps_the_stored_text_as_it_is(seeded, label):
    """``--json``: valid JSON whose strings decode to the stored text."""
    ran = run(COMMANDS[label], seeded)
    assert any(HOSTILE in text for text in _strings(json.loads(ran.stdout)))
    assert "\x1b" not in ran.stdout


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) else []


# -- the operator API --------------------------------------------------------------


def test_the_operator_answers_job_data_redacted(seeded):
    """``operator.show`` and the outbox listing: what the admin and the
    commands print, so what code reads too."""
    shown = json.dumps(operator.show(seeded.leaky), default=str)
    assert _leaks(shown) == [] and _shown(shown, JOB_DATA) == []
    listed = json.dumps(outbox_operator.unpublished(), default=str)
    assert _leaks(listed) == [] and _shown(listed, ("outbox_input",)) == []
