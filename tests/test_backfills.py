"""backfill(): the pass (keyset pages, one step each), pacing, pause and resume,
requires= gating, and ``manage.py jobs_backfill`` (dry run, --list, --pending,
--write, --all), on PostgreSQL through the real worker path."""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F

from django_ultimate_jobs import backfill
from django_ultimate_jobs.backfills import (
    BACKFILL_JOB_PREFIX,
    enqueue_backfill,
    pause_backfill,
    resume_backfill,
    unregister_backfill,
)
from django_ultimate_jobs.errors import (
    BackfillDeclarationInvalid,
    BackfillPaused,
    BackfillStateInvalid,
)
from django_ultimate_jobs.models import Backfill, Job, Step
from django_ultimate_jobs.testing import run_jobs
from tests.jobsapp.models import BackfillItem

pytestmark = pytest.mark.django_db

GROUP = 7  # the items these tests walk (the acceptance tier uses 1 and 2)


@pytest.fixture
def declare(pg_driver):
    """Declare backfills over group-7 items; each is forgotten afterwards."""
    names: list[str] = []

    def make(name: str, *, handle=None, **options):
        options.setdefault("batch", 10)
        options.setdefault("rate", 1000)
        options.setdefault("source", lambda: BackfillItem.objects.filter(grp=GROUP))
        backfill(
            name=name,
            handle=handle or _mark,
            **options,
        )
        names.append(name)
        return name

    yield make
    for name in names:
        unregister_backfill(name)


def _mark(rows) -> None:
    BackfillItem.objects.filter(pk__in=[r.pk for r in rows]).update(
        handled=F("handled") + 1
    )


def _items(count: int) -> None:
    BackfillItem.objects.bulk_create(BackfillItem(grp=GROUP) for _ in range(count))


def _handled() -> list[int]:
    return list(
        BackfillItem.objects.filter(grp=GROUP)
        .order_by("pk")
        .values_list("handled", flat=True)
    )


def _drain(pg_driver):
    return run_jobs(queues=["ultimate_jobs"], driver=pg_driver)


def _command(*args: str) -> str:
    out = StringIO()
    call_command("jobs_backfill", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _steps(name: str) -> list[str]:
    run_ids = Job.objects.filter(name=BACKFILL_JOB_PREFIX + name).values("run_id")
    return list(
        Step.objects.filter(run_id__in=run_ids)
        .order_by("started_at", "name")
        .values_list("name", flat=True)
    )


# -- the pass ---------------------------------------------------------------------


def test_a_pass_handles_every_row_once_one_step_per_page(declare, pg_driver):
    name = declare("t.bf.pages")
    _items(25)

    enqueue_backfill(name)
    _drain(pg_driver)

    assert _handled() == [1] * 25
    row = Backfill.objects.get(name=name)
    assert (row.state, row.rows_done, row.pages_done, row.total) == ("done", 25, 3, 25)
    assert row.cursor == BackfillItem.objects.filter(grp=GROUP).latest("pk").pk
    assert row.started_at is not None and row.finished_at is not None
    assert sorted(_steps(name)) == ["finish", "page-0", "page-1", "page-2", "start"]


def test_a_done_backfill_is_refused_without_force_and_rerun_with_it(declare, pg_driver):
    name = declare("t.bf.force")
    _items(5)
    enqueue_backfill(name)
    _drain(pg_driver)

    with pytest.raises(CommandError, match="X_BACKFILL_APPLIED"):
        _command(name, "--write", "--no-follow")
    assert _handled() == [1] * 5

    _command(name, "--write", "--force", "--no-follow")
    _drain(pg_driver)
    assert _handled() == [2] * 5
    assert Backfill.objects.get(name=name).state == "done"


def test_a_pass_enqueued_twice_runs_once(declare, pg_driver):
    """The key is the backfill's name: one live pass per backfill."""
    name = declare("t.bf.key")
    _items(3)
    first, second = enqueue_backfill(name), enqueue_backfill(name)
    assert second.deduped and second.id == first.id
    _drain(pg_driver)
    assert _handled() == [1] * 3


def test_pages_are_paced_at_the_declared_rate(declare, pg_driver):
    name = declare("t.bf.rate", rate=20)  # 50 ms from one page's start to the next
    _items(40)  # 4 full pages and an empty look
    enqueue_backfill(name)
    began = time.monotonic()
    _drain(pg_driver)
    assert time.monotonic() - began >= 0.15  # three waits between four pages
    assert _handled() == [1] * 40


def test_a_slow_rate_sleeps_durably_between_pages(declare, pg_driver, clock):
    """One page every 50 s: the pass is suspended (no slot held) in between."""
    name = declare("t.bf.slow", rate=0.02)
    _items(15)
    job_id = enqueue_backfill(name).id
    _drain(pg_driver)
    assert Backfill.objects.get(name=name).rows_done == 10
    assert Job.objects.get(id=job_id).state == "suspended"

    clock.advance(timedelta(seconds=51))
    _drain(pg_driver)
    assert Backfill.objects.get(name=name).state == "done"
    assert _handled() == [1] * 15
    assert sorted(_steps(name)) == ["finish", "pace-1", "page-0", "page-1", "start"]


def test_a_source_that_is_no_queryset_fails_the_pass_with_a_code(pg_driver):
    backfill(name="t.bf.bad", source=lambda: [1, 2], handle=_mark)
    try:
        enqueue_backfill("t.bf.bad")
        _drain(pg_driver)
        row = Backfill.objects.get(name="t.bf.bad")
        assert row.state == "failed"
        assert row.error.startswith("X_BACKFILL_SOURCE_INVALID")
        assert Job.objects.get(name=BACKFILL_JOB_PREFIX + "t.bf.bad").state == "dead"
    finally:
        unregister_backfill("t.bf.bad")


@pytest.mark.parametrize(
    "source, problem",
    [
        (lambda: BackfillItem.objects.filter(grp=GROUP)[:10], "a sliced QuerySet"),
        (lambda: BackfillItem.objects.filter(grp=GROUP).values("pk"), ".values()"),
        (
            lambda: BackfillItem.objects.filter(grp=GROUP).union(
                BackfillItem.objects.filter(grp=GROUP)
            ),
            "a union() of QuerySets",
        ),
    ],
)
def test_a_source_that_cannot_be_paged_is_refused_by_the_dry_run_and_the_pass(
    declare, pg_driver, source, problem
):
    name = declare("t.bf.unpageable", source=source, count=lambda: 3)
    _items(3)
    with pytest.raises(CommandError, match="X_BACKFILL_SOURCE_INVALID") as refused:
        _command(name)
    assert problem in str(refused.value)

    job_id = enqueue_backfill(name).id
    _drain(pg_driver)
    assert Job.objects.get(id=job_id).state == "dead"  # terminal: no retry
    assert Job.objects.get(id=job_id).attempt == 1
    row = Backfill.objects.get(name=name)
    assert row.state == "failed" and problem in row.error
    assert _handled() == [0] * 3


def test_the_dry_run_refuses_a_primary_key_the_pass_cannot_page_by(declare):
    """Visit's key is composite: no keyset cursor, refused before --write."""
    from tests.jobsapp.models import Visit

    name = declare("t.bf.composite", source=Visit.objects.all)
    with pytest.raises(CommandError, match="X_BACKFILL_SOURCE_INVALID") as refused:
        _command(name)
    assert "whose primary key is a CompositePrimaryKey" in str(refused.value)


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"batch": 0}, "batch must be a whole number >= 1"),
        ({"rate": float("inf")}, "rate must be a number of pages/s from"),
        ({"rate": 0}, "rate must be a number of pages/s from"),
        ({"rate": 1e-300}, r"from 1.16e-05 \(one a day\) to 1000"),
        ({"rate": 1e6}, "rate must be a number of pages/s from"),
        ({"name": "t.bf.a\x00b"}, "name holds a NUL character"),
        ({"name": "t" * 178}, "name must be at most 177 characters, not 178"),
        ({"name": " t.bf.padded"}, "name must be written without surrounding spaces"),
        ({"requires": "other"}, "requires must be a list"),
        ({"requires": ["t.bf.self"]}, "cannot require itself"),
        ({"handle": None}, "handle must be a callable"),
    ],
)
def test_a_bad_declaration_is_refused_before_anything_is_registered(options, problem):
    arguments = {"name": "t.bf.self", "source": lambda: None, "handle": _mark}
    with pytest.raises(BackfillDeclarationInvalid, match=problem) as refused:
        backfill(**{**arguments, **options})
    assert refused.value.code == "X_BACKFILL_DECLARATION_INVALID"
    with pytest.raises(CommandError, match="X_BACKFILL_UNKNOWN"):
        _command("t.bf.self")


# -- pause and resume ---------------------------------------------------------------


def test_a_pause_stops_the_pass_before_its_next_page_and_resume_goes_on(
    declare, pg_driver
):
    def mark_then_pause(rows):
        _mark(rows)
        if Backfill.objects.get(name="t.bf.pause").pages_done == 0:
            pause_backfill("t.bf.pause")  # an operator, while page 0 runs

    name = declare("t.bf.pause", handle=mark_then_pause)
    _items(30)
    enqueue_backfill(name)
    _drain(pg_driver)

    row = Backfill.objects.get(name=name)
    assert (row.state, row.rows_done) == ("paused", 10)
    assert _handled() == [1] * 10 + [0] * 20
    with pytest.raises(BackfillPaused):
        enqueue_backfill(name)
    with pytest.raises(BackfillStateInvalid):
        pause_backfill(name)

    resume_backfill(name)
    assert Backfill.objects.get(name=name).state == "pending"
    _drain(pg_driver)

    assert _handled() == [1] * 30
    row = Backfill.objects.get(name=name)
    assert (row.state, row.rows_done, row.pages_done) == ("done", 30, 3)
    with pytest.raises(BackfillStateInvalid, match="X_BACKFILL_STATE_INVALID"):
        resume_backfill(name)


def test_a_paused_backfill_enqueued_anyway_does_nothing(declare, pg_driver):
    name = declare("t.bf.paused")
    _items(3)
    pause_backfill(name)
    declared = Backfill.objects.get(name=name)
    assert declared.state == "paused"
    from django_ultimate_jobs.backfills import get_backfill

    get_backfill(name).job.enqueue()  # bypassing the gate
    _drain(pg_driver)
    assert _handled() == [0] * 3
    assert Backfill.objects.get(name=name).state == "paused"


# -- requires= ------------------------------------------------------------------------


def test_a_backfill_is_refused_while_its_requirements_are_not_done(declare, pg_driver):
    first = declare("t.bf.first")
    second = declare("t.bf.second", requires=[first])
    _items(3)

    with pytest.raises(CommandError, match="X_BACKFILL_REQUIRES_PENDING"):
        _command(second, "--write", "--no-follow")
    assert not Job.objects.filter(name=BACKFILL_JOB_PREFIX + second).exists()
    assert "waits for t.bf.first (not done)" in _command(second)

    enqueue_backfill(first)
    _drain(pg_driver)
    _command(second, "--write", "--no-follow")
    _drain(pg_driver)
    assert Backfill.objects.get(name=second).state == "done"


def test_all_runs_every_pending_backfill_requirements_first(declare, pg_driver, clock):
    seen: list[str] = []

    def note_requirement(rows):
        seen.append(Backfill.objects.get(name="t.bf.z-first").state)
        _mark(rows)

    # Named (and so listed) before what it requires.
    last = declare("t.bf.a-last", requires=["t.bf.z-first"], handle=note_requirement)
    first = declare("t.bf.z-first")
    _items(12)

    dry = _command("--all")
    assert dry.index("t.bf.z-first (pending)") < dry.index("t.bf.a-last (pending)")
    assert not Job.objects.filter(name__startswith=BACKFILL_JOB_PREFIX + "t.").exists()

    out = _command("--all", "--write", "--no-follow")
    assert out.index("t.bf.z-first: pass queued") < out.index(
        "t.bf.a-last: pass queued"
    )
    # The dependent pass waits (no attempt spent) until its requirement is done.
    ran = []
    for _ in range(3):
        ran += [(e.claimed.name, str(e.outcome)) for e in _drain(pg_driver)]
        clock.advance(timedelta(seconds=10))
    assert seen == ["done", "done"]  # each page of the dependent ran after it
    rows = {row.name: row for row in Backfill.objects.filter(name__in=[first, last])}
    assert rows[first].state == rows[last].state == "done"
    assert _handled() == [2] * 12  # both passes walk the same items
    assert Job.objects.get(name=BACKFILL_JOB_PREFIX + last).attempt == 1


def _command_both(*args: str) -> tuple[str, str, CommandError | None]:
    out, err = StringIO(), StringIO()
    try:
        call_command("jobs_backfill", *args, stdout=out, stderr=err)
    except CommandError as error:
        return out.getvalue(), err.getvalue(), error
    return out.getvalue(), err.getvalue(), None


def test_all_refuses_a_bad_backfill_alone_and_goes_on_with_the_rest(declare):
    """A cycle, an unknown requirement or a bad count() is printed with its
    code; the others are dry-run or queued; the exit is non-zero."""
    good = declare("t.bf.all-good")
    declare("t.bf.all-c1", requires=["t.bf.all-c2"])
    declare("t.bf.all-c2", requires=["t.bf.all-c1"])
    declare("t.bf.all-orphan", requires=["t.bf.all-nope"])
    declare("t.bf.all-count", count=lambda: -1)
    _items(3)

    # The dry run counts (a bad count() is refused); --write does not.
    for args, refusals in ((("--all",), 4), (("--all", "--write", "--no-follow"), 3)):
        out, err, refused = _command_both(*args)
        assert refused is not None
        assert f"{refusals} backfills refused" in str(refused)
        assert "t.bf.all-c1: X_BACKFILL_REQUIRES_CYCLE" in err
        assert "t.bf.all-c2: X_BACKFILL_REQUIRES_CYCLE" in err
        assert (
            "t.bf.all-orphan: X_BACKFILL_UNKNOWN: backfill 't.bf.all-orphan' "
            "requires 't.bf.all-nope', which no backfill declares"
        ) in err
        if refusals == 4:
            assert "t.bf.all-count: X_BACKFILL_SOURCE_INVALID" in err
            assert "t.bf.all-good (pending): would handle up to 3 rows" in out
    assert Job.objects.filter(name=BACKFILL_JOB_PREFIX + good).exists()
    assert "t.bf.all-good: pass queued as job" in out


def test_a_cycle_in_requires_is_refused_with_its_path(declare):
    declare("t.bf.c1", requires=["t.bf.c2"])
    declare("t.bf.c2", requires=["t.bf.c1"])
    with pytest.raises(CommandError, match="X_BACKFILL_REQUIRES_CYCLE") as refused:
        _command("t.bf.c1", "--write")
    assert "t.bf.c1 -> t.bf.c2 -> t.bf.c1" in str(refused.value)


def test_an_unknown_name_is_refused(declare):
    with pytest.raises(CommandError, match="X_BACKFILL_UNKNOWN"):
        _command("t.bf.nope")
    declare("t.bf.orphan-req", requires=["t.bf.nope"])
    with pytest.raises(CommandError, match="X_BACKFILL_UNKNOWN"):
        _command("t.bf.orphan-req")


def test_a_pass_whose_requirement_is_not_declared_fails_terminally(declare, pg_driver):
    from django_ultimate_jobs.backfills import get_backfill

    name = declare("t.bf.lost-req", requires=["t.bf.nope"])
    job_id = get_backfill(name).job.enqueue().id  # bypassing the command's gate
    _drain(pg_driver)
    assert Job.objects.get(id=job_id).state == "dead"
    row = Backfill.objects.get(name=name)
    assert row.state == "failed" and row.error.startswith("X_BACKFILL_UNKNOWN")


# -- the command ----------------------------------------------------------------------


def test_the_dry_run_counts_rows_and_pages_and_writes_nothing(declare):
    name = declare("t.bf.dry", batch=10, rate=2)
    _items(25)
    out = _command(name)
    assert (
        "t.bf.dry (pending): would handle up to 25 rows in 3 pages of 10 at 2 pages/s "
        "(at least 1s)"
    ) in out
    assert "dry run: pass --write to run it" in out
    assert not Backfill.objects.filter(name=name).exists()
    assert not Job.objects.filter(name=BACKFILL_JOB_PREFIX + name).exists()


def test_list_and_pending_show_each_backfill_and_its_progress(declare, pg_driver):
    done = declare("t.bf.listed-done")
    waiting = declare("t.bf.listed-waiting", requires=[done])
    _items(4)
    enqueue_backfill(done)
    _drain(pg_driver)

    listed = _command("--list")
    assert "t.bf.listed-done: done, 4/4 rows, 1 page, finished " in listed
    assert "t.bf.listed-waiting: pending (requires t.bf.listed-done)" in listed

    out = StringIO()
    with pytest.raises(CommandError, match=r"backfills not done"):
        call_command("jobs_backfill", "--pending", stdout=out)
    assert "t.bf.listed-waiting: pending" in out.getvalue()
    assert "t.bf.listed-done:" not in out.getvalue()
    assert waiting


def test_write_follows_the_pass_with_plain_lines_off_a_terminal(declare, pg_driver):
    """Off a terminal: no carriage returns, a final line with the outcome."""
    name = declare("t.bf.follow")
    _items(15)
    enqueue_backfill(name)
    _drain(pg_driver)
    enqueued = enqueue_backfill(name, force=True)
    _drain(pg_driver)
    from django_ultimate_jobs.management.commands.jobs_backfill import Command

    command = Command(stdout=StringIO())
    command._follow(name, enqueued)
    text = command.stdout._out.getvalue()
    assert "\r" not in text
    assert "t.bf.follow: 15/15 rows" in text
    assert text.rstrip().endswith("t.bf.follow: done, 15 rows in 2 pages")


def _follow_while_a_worker_runs(name, pg_driver, monkeypatch) -> tuple[str, Any]:
    """Queue ``name``'s pass and follow it; the pass runs between two polls.

    The follower's first read finds the row ``pending`` (no worker has begun
    the pass); its wait then runs the pass through the real worker path.
    Answers what it printed and the CommandError it raised, if any.
    """
    from django_ultimate_jobs.management import progress
    from django_ultimate_jobs.management.commands import jobs_backfill

    def worker_runs_meanwhile(seconds: float) -> None:
        _drain(pg_driver)

    enqueued = enqueue_backfill(name)
    assert Backfill.objects.get(name=name).state == "pending"
    # The command's own clock: its poll wait runs the worker instead.
    clock = SimpleNamespace(sleep=worker_runs_meanwhile, monotonic=time.monotonic)
    monkeypatch.setattr(progress, "time", clock)
    command = jobs_backfill.Command(stdout=StringIO())
    refused = None
    try:
        command._follow(name, enqueued)
    except CommandError as error:
        refused = error
    return command.stdout._out.getvalue(), refused


def test_the_first_progress_line_shows_the_counted_total(
    declare, pg_driver, monkeypatch
):
    """The first line read the row before any worker counted it: "0/0 rows".
    A pending pass prints nothing; the first line has the real total."""
    name = declare("t.bf.first-line")
    _items(15)
    text, refused = _follow_while_a_worker_runs(name, pg_driver, monkeypatch)
    assert refused is None
    lines = text.strip().splitlines()
    assert lines[0].startswith("t.bf.first-line: 15/15 rows"), lines
    assert "0/0" not in text
    assert lines[-1] == "t.bf.first-line: done, 15 rows in 2 pages"


def test_a_followed_pass_that_is_paused_exits_non_zero(declare, pg_driver, monkeypatch):
    """Paused before it was done is not success (it exited 0): CommandError
    (exit 1) saying so and how to go on."""

    def mark_then_pause(rows):
        _mark(rows)
        pause_backfill("t.bf.paused-follow")  # an operator, while page 0 runs

    name = declare("t.bf.paused-follow", handle=mark_then_pause)
    _items(30)
    text, refused = _follow_while_a_worker_runs(name, pg_driver, monkeypatch)
    assert refused is not None, text
    assert str(refused) == (
        "backfill 't.bf.paused-follow' was paused before it was done (10 rows "
        "handled); resume it from the admin's Backfills page (or "
        "resume_backfill()), then follow it: python manage.py jobs_backfill "
        "t.bf.paused-follow --write"
    )
    assert text.rstrip().endswith("t.bf.paused-follow: paused, 10 rows in 1 page")


@pytest.mark.parametrize("before", ["done", "failed"])
def test_write_follows_only_the_pass_it_queued_never_the_last_outcome(
    declare, pg_driver, before
):
    """A pass queued again makes the row its own at once: the follower never
    reports the previous pass's ``done`` (exit 0) or failure (exit 1)."""
    from django_ultimate_jobs import operator
    from django_ultimate_jobs.management.commands.jobs_backfill import Command

    name = declare(f"t.bf.refollow-{before}")
    _items(5)
    enqueue_backfill(name)
    _drain(pg_driver)
    if before == "failed":
        Backfill.objects.filter(name=name).update(state="failed", error="X_OLD")

    enqueued = enqueue_backfill(name, force=before == "done")
    row = Backfill.objects.get(name=name)
    assert (row.state, row.run_id, row.error) == ("pending", enqueued.run_id, "")

    operator.cancel(enqueued.id)  # the new pass never runs
    command = Command(stdout=StringIO())
    with pytest.raises(CommandError, match="ended cancelled without finishing"):
        command._follow(name, enqueued)
    assert "done, 5 rows" not in command.stdout._out.getvalue()


def test_one_of_name_list_pending_all_is_required():
    with pytest.raises(CommandError, match="give one of"):
        _command()
    with pytest.raises(CommandError, match="give one of"):
        _command("--list", "--pending")


@pytest.mark.parametrize(
    "args, refusal",
    [
        (("--list", "--write"), "--write runs NAME or --all"),
        (("--pending", "--write"), "--write runs NAME or --all"),
        (("t.bf.usage", "--force"), "--force is for --write"),
        (("--all", "--no-follow"), "--no-follow is for --write"),
    ],
)
def test_an_option_that_would_be_ignored_is_a_usage_error(declare, args, refusal):
    declare("t.bf.usage")
    with pytest.raises(CommandError, match=refusal):
        _command(*args)


# -- the admin ------------------------------------------------------------------------

ADMIN_LIST = "admin:ultimate_jobs_backfill_changelist"


@pytest.fixture
def backfill_viewer(db):
    """A staff user who may look at backfills but not pause or resume them."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("bf-viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_backfill"))
    return user


def _act(client, action: str, name: str):
    """Post the action, check its confirmation page acted on nothing, confirm."""
    from django.urls import reverse

    form = {"action": action, "_selected_action": [name]}
    before = Backfill.objects.filter(name=name).values_list("state", flat=True).first()
    asked = client.post(reverse(ADMIN_LIST), form)
    assert asked.status_code == 200 and 'name="confirmed" value="yes"' in asked.text
    assert name in asked.text
    assert (
        Backfill.objects.filter(name=name).values_list("state", flat=True).first()
        == before
    )
    return client.post(reverse(ADMIN_LIST), {**form, "confirmed": "yes"}, follow=True)


def test_the_admin_lists_progress_and_pauses_and_resumes(
    declare, pg_driver, admin_client
):
    from django.contrib.admin.models import LogEntry
    from django.urls import reverse

    name = declare("t.bf.admin")
    _items(25)
    enqueue_backfill(name)
    _drain(pg_driver)
    Backfill.objects.filter(name=name).update(state="running", rows_done=10)

    page = admin_client.get(reverse(ADMIN_LIST))
    assert page.status_code == 200
    assert "t.bf.admin" in page.text and "10 / 25 (40%)" in page.text

    _act(admin_client, "pause_selected", name)
    assert Backfill.objects.get(name=name).state == "paused"
    _act(admin_client, "resume_selected", name)
    assert Backfill.objects.get(name=name).state == "pending"
    assert Job.objects.filter(
        name=BACKFILL_JOB_PREFIX + name, state__in=["ready", "delayed"]
    ).exists()
    answer = _act(admin_client, "resume_selected", name)  # not paused any more
    assert "X_BACKFILL_STATE_INVALID" in answer.text
    assert sorted(
        LogEntry.objects.filter(object_id=name).values_list("change_message", flat=True)
    ) == ["Backfill paused (admin)", "Backfill resumed (admin)"]


def test_the_admin_verbs_need_the_change_permission_and_csrf(
    declare, client, backfill_viewer, admin_user
):
    from django.test import Client
    from django.urls import reverse

    name = declare("t.bf.admin-perm")
    Backfill.objects.create(name=name, state="running")

    client.force_login(backfill_viewer)
    assert client.get(reverse(ADMIN_LIST)).status_code == 200
    for confirmed in ({}, {"confirmed": "yes"}):
        forged = client.post(
            reverse(ADMIN_LIST),
            {"action": "pause_selected", "_selected_action": [name], **confirmed},
        )
        assert forged.status_code == 403
    assert Backfill.objects.get(name=name).state == "running"

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    refused = strict.post(
        reverse(ADMIN_LIST), {"action": "pause_selected", "_selected_action": [name]}
    )
    assert refused.status_code == 403
    assert Backfill.objects.get(name=name).state == "running"


@pytest.mark.parametrize(
    "lookup", ["error__startswith", "cursor__gt", "name__regex", "run_id"]
)
def test_the_admin_list_refuses_lookups_other_than_its_state_filter(
    declare, admin_client, lookup
):
    from django.urls import reverse

    Backfill.objects.create(name="t.bf.lookup", state="failed", error="X_SECRET")
    assert admin_client.get(reverse(ADMIN_LIST), {lookup: "X"}).status_code == 400
    assert (
        admin_client.get(reverse(ADMIN_LIST), {"state__exact": "failed"}).status_code
        == 200
    )


def test_on_a_terminal_the_progress_is_a_bar_with_rate_and_eta():
    from django.core.management.base import OutputWrapper

    from django_ultimate_jobs.management.progress import Progress

    class Terminal(StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    progress = Progress(OutputWrapper(screen), "emails")
    row = Backfill(name="emails", rows_done=0, total=1000)
    progress.show(row)
    progress.first = (progress.first[0] - 2.0, 0)  # as if it began 2 s ago
    row.rows_done = 500
    progress.show(row)
    last = screen.getvalue().split("\r")[-1]
    assert last.startswith("emails [###############               ] 500/1,000 rows")
    assert last.endswith("\x1b[K")  # what a longer line left is erased
    assert ", 250 rows/s" in last and "ETA 2s" in last


def test_the_admin_change_page_is_read_only_even_for_a_superuser(declare, admin_client):
    from django.contrib.admin.models import LogEntry
    from django.urls import reverse

    Backfill.objects.create(name="t.bf.ro", state="failed", error="X_OLD")
    page = reverse("admin:ultimate_jobs_backfill_change", args=["t.bf.ro"])
    assert admin_client.get(page).status_code == 200
    posted = admin_client.post(page, {"state": "done", "error": ""})
    assert posted.status_code == 403
    assert Backfill.objects.get(name="t.bf.ro").state == "failed"
    assert not LogEntry.objects.filter(object_id="t.bf.ro").exists()


def test_the_admin_answers_input_no_row_can_hold_as_the_jobs_list_does(
    declare, admin_client
):
    from django.urls import reverse

    Backfill.objects.create(name="t.bf.nul", state="running")
    for bad in ("a\x00b", "bogus"):
        answer = admin_client.get(reverse(ADMIN_LIST), {"state__exact": bad})
        assert answer.status_code == 302 and answer.url.endswith("?e=1")
    page = reverse("admin:ultimate_jobs_backfill_change", args=["x\x00y"])
    assert admin_client.get(page).status_code == 404
    answer = admin_client.post(
        reverse(ADMIN_LIST),
        {
            "action": "pause_selected",
            "_selected_action": ["x\x00y"],
            "confirmed": "yes",
        },
        follow=True,
    )
    assert answer.status_code == 200 and "X_BACKFILL_UNKNOWN" in answer.text
    assert Backfill.objects.get(name="t.bf.nul").state == "running"


def test_a_name_declared_by_another_handle_is_refused_as_a_duplicate(declare):
    from django_ultimate_jobs.errors import JobDuplicate

    name = declare("t.bf.dup")
    with pytest.raises(JobDuplicate, match="two backfills are declared"):
        backfill(name=name, source=lambda: None, handle=lambda rows: None)
    declare("t.bf.dup")  # the same declaration again (a module reloaded) is fine
