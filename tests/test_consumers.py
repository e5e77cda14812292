"""Stream consumers: declaration, runs, the cursor moving with the effects,
coded refusals (a callable that raises, a cursor that goes backwards), the
supervisor task, ``manage.py jobs_consumer`` and the admin page, on
PostgreSQL through the real worker path (``run_jobs``).

The stream is ``StreamEvent`` rows (cursor: the last id read); each item
handled writes one ``StreamEffect`` row, with no unique key, so an item
handled twice shows twice.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count

from django_ultimate_jobs.consumers import (
    CONSUMER_JOB_PREFIX,
    Batch,
    consumer,
    pause_consumer,
    registered_consumers,
    resume_consumer,
    run_consumer,
    set_consumer_cursor,
    unregister_consumer,
)
from django_ultimate_jobs.crontask import get_task
from django_ultimate_jobs.errors import JobsError
from django_ultimate_jobs.models import Consumer, Job
from django_ultimate_jobs.registry import get_job
from django_ultimate_jobs.testing import run_jobs
from django_ultimate_jobs.testing.scheduling import run_scheduler
from tests.jobsapp.models import StreamEffect, StreamEvent
from tests.support.terminal import terminal

pytestmark = pytest.mark.django_db

PAGE = 10


def _events(count: int) -> list[int]:
    made = StreamEvent.objects.bulk_create(StreamEvent(payload=n) for n in range(count))
    return [event.pk for event in made]


def read_events(cursor):
    ids = list(
        StreamEvent.objects.filter(id__gt=cursor)
        .order_by("id")
        .values_list("id", flat=True)[:PAGE]
    )
    return Batch(items=ids, cursor=ids[-1] if ids else cursor)


def record(name):
    def handle(items):
        StreamEffect.objects.bulk_create(
            StreamEffect(consumer=name, event_id=event_id) for event_id in items
        )

    return handle


@pytest.fixture
def declare(pg_driver):
    """Declare consumers in a test; each (job and task too) is forgotten after."""
    names: list[str] = []

    def make(name: str, **options):
        options.setdefault("fetch", read_events)
        options.setdefault("handle", record(name))
        options.setdefault("start", 0)
        spec = consumer(name=name, **options)
        names.append(name)
        return spec

    yield make
    for name in names:
        unregister_consumer(name)


def _drain(pg_driver):
    return run_jobs(driver=pg_driver)


def _handled(name: str) -> dict[int, int]:
    rows = (
        StreamEffect.objects.filter(consumer=name)
        .values("event_id")
        .annotate(n=Count("id"))
    )
    return {row["event_id"]: row["n"] for row in rows}


def _row(name: str) -> Consumer:
    return Consumer.objects.get(name=name)


# -- declaration -----------------------------------------------------------------------


def test_a_bad_declaration_is_refused_whole_and_nothing_is_registered(pg_driver):
    before = {spec.name for spec in registered_consumers()}
    with pytest.raises(JobsError) as refused:
        consumer(
            name="t.cons.bad ",
            fetch="not callable",
            handle=None,
            start=float("nan"),
            order="alphabetical",
            poll=0,
            run_for=0,
        )
    assert refused.value.code == "X_CONSUMER_DECLARATION_INVALID"
    for words in (
        "name must be written without surrounding spaces",
        "fetch must be a callable",
        "handle must be a callable",
        "order must be 'natural', None or a key callable",
        "start is not JSON-safe",
        "poll must be more than zero",
        "run_for must be more than zero",
    ):
        assert words in refused.value.cause
    assert {spec.name for spec in registered_consumers()} == before


def test_a_bad_schedule_is_refused_and_leaves_no_job_behind(pg_driver):
    with pytest.raises(JobsError) as refused:
        consumer(name="t.cons.cron", fetch=read_events, handle=print, cron="61 * * * *")
    assert refused.value.code == "X_CRON_INVALID"
    assert get_job(CONSUMER_JOB_PREFIX + "t.cons.cron") is None
    assert get_task(CONSUMER_JOB_PREFIX + "t.cons.cron") is None


def test_a_consumer_is_a_job_and_a_supervisor_task(declare):
    spec = declare("t.cons.shape", cron="*/5 * * * *", tz="Europe/Paris")
    assert spec.job_name == "ultimate_jobs.consumer.t.cons.shape"
    task = get_task(spec.job_name)
    assert (task.cron, task.tz) == ("*/5 * * * *", "Europe/Paris")


# -- runs ----------------------------------------------------------------------------------


def test_a_run_handles_every_item_once_and_moves_the_cursor(declare, pg_driver):
    declare("t.cons.run")
    ids = _events(25)
    run_consumer("t.cons.run")
    (execution,) = _drain(pg_driver)

    assert _handled("t.cons.run") == dict.fromkeys(ids, 1)
    row = _row("t.cons.run")
    assert (row.state, row.cursor, row.items_done, row.batches_done) == (
        "idle",
        ids[-1],
        25,
        3,
    )
    assert (row.run_items, row.run_batches, row.version) == (25, 3, 3)
    assert execution.result == {
        "consumer": "t.cons.run",
        "batches": 3,
        "items": 25,
        "ended": "caught-up",
    }


def test_a_later_run_starts_after_the_stored_cursor(declare, pg_driver):
    declare("t.cons.later")
    first = _events(5)
    run_consumer("t.cons.later")
    _drain(pg_driver)
    second = _events(4)
    run_consumer("t.cons.later")
    _drain(pg_driver)
    assert _handled("t.cons.later") == dict.fromkeys(first + second, 1)
    assert _row("t.cons.later").run_items == 4


def test_a_handler_that_raises_rolls_back_its_batch_and_the_cursor_stays(
    declare, pg_driver, clock
):
    """The batch's writes and the cursor's move commit together or not at all;
    the job machinery retries the run, which goes on from the cursor."""
    failing = {"on": True}
    handle = record("t.cons.handle")

    def flaky(items):
        handle(items)  # written, then rolled back with the batch
        if failing["on"] and len(items) < PAGE:
            raise ConnectionError("the warehouse API is down")

    declare("t.cons.handle", handle=flaky)
    ids = _events(25)
    job_id = run_consumer("t.cons.handle").id
    _drain(pg_driver)

    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("ready", 1)
    assert job.last_error == (
        "X_CONSUMER_HANDLE_FAILED: handle() of consumer 't.cons.handle' raised "
        "ConnectionError on a batch of 5 item(s) (fix: see the job's stack for "
        "handle()'s own error; the batch is handled again from the same cursor "
        "on the next attempt)"
    )
    assert "the warehouse API is down" in job.last_error_stack
    assert _handled("t.cons.handle") == dict.fromkeys(ids[:20], 1)
    row = _row("t.cons.handle")
    assert (row.cursor, row.state) == (ids[19], "idle")
    assert row.error.startswith("X_CONSUMER_HANDLE_FAILED")

    failing["on"] = False
    clock.advance(minutes=1)
    _drain(pg_driver)
    assert _handled("t.cons.handle") == dict.fromkeys(ids, 1)
    row = _row("t.cons.handle")
    assert (row.cursor, row.error, Job.objects.get(id=job_id).state) == (
        ids[-1],
        "",
        "done",
    )


def test_a_fetch_that_raises_is_retried_and_handles_nothing(declare, pg_driver):
    def down(cursor):
        raise TimeoutError("stream timed out")

    declare("t.cons.fetch", fetch=down)
    _events(3)
    job_id = run_consumer("t.cons.fetch").id
    _drain(pg_driver)
    job = Job.objects.get(id=job_id)
    assert job.state == "ready"
    assert job.last_error.startswith(
        "X_CONSUMER_FETCH_FAILED: fetch() of consumer 't.cons.fetch' raised TimeoutError"
    )
    assert "stream timed out" not in job.last_error  # its message stays on the stack
    assert not StreamEffect.objects.exists() and _row("t.cons.fetch").cursor == 0


@pytest.mark.parametrize(
    ("answer", "code", "words"),
    [
        (lambda c: Batch(items=[1], cursor=c - 1), "X_CONSUMER_CURSOR_BACKWARDS", "behind the stored one"),
        (lambda c: Batch(items=[1], cursor=None), "X_CONSUMER_CURSOR_BACKWARDS", "behind the stored one"),
        (lambda c: Batch(items=[1, 2], cursor=c), "X_CONSUMER_CURSOR_BACKWARDS", "2 item(s) without moving the cursor"),
        (lambda c: {"items": [], "cursor": c}, "X_CONSUMER_BATCH_INVALID", "answered a dict, not a Batch"),
        (lambda c: Batch(items="abc", cursor=c + 1), "X_CONSUMER_BATCH_INVALID", "items that are a str"),
        (lambda c: Batch(items=[1], cursor=str(c + 1)), "X_CONSUMER_BATCH_INVALID", "cannot order a str cursor after a int one"),
        (lambda c: Batch(items=[1], cursor=float("inf")), "X_CONSUMER_BATCH_INVALID", "answered a cursor that is not JSON-safe"),
    ],
)  # fmt: skip
def test_a_bad_batch_halts_the_consumer_with_a_code_and_handles_nothing(
    declare, pg_driver, answer, code, words
):
    declare("t.cons.bad", fetch=answer, start=10)
    job_id = run_consumer("t.cons.bad").id
    _drain(pg_driver)

    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("dead", 1)  # terminal: not retried
    assert job.last_error.startswith(f"{code}: ") and words in job.last_error
    row = _row("t.cons.bad")
    assert (row.state, row.cursor, row.version) == ("halted", 10, 0)
    assert row.error.startswith(code)
    assert not StreamEffect.objects.exists()


def test_items_answered_as_a_tuple_are_handled_as_a_list(declare, pg_driver):
    seen = []

    def fetch(cursor):
        if cursor >= 4:
            return Batch(items=(), cursor=cursor)  # caught up
        return Batch(items=(cursor + 1, cursor + 2), cursor=cursor + 2)

    declare("t.cons.tuple", fetch=fetch, handle=seen.append, start=0)
    job_id = run_consumer("t.cons.tuple").id
    _drain(pg_driver)
    assert Job.objects.get(id=job_id).state == "done"
    assert seen == [[1, 2], [3, 4]]
    assert _row("t.cons.tuple").cursor == 4


def test_an_opaque_cursor_is_never_compared_but_must_move_with_items(
    declare, pg_driver
):
    tokens = iter(["zz", "aa", "mm"])  # no order: fine for order=None

    def opaque(cursor):
        token = next(tokens, None)
        return Batch(items=[1] if token else [], cursor=token or cursor)

    declare("t.cons.opaque", fetch=opaque, order=None, start="start")
    run_consumer("t.cons.opaque")
    _drain(pg_driver)
    row = _row("t.cons.opaque")
    assert (row.state, row.cursor, row.items_done) == ("idle", "mm", 3)


def test_a_key_order_compares_what_the_key_answers(declare, pg_driver):
    def numbered(cursor):
        n = int(cursor.split("-")[1])
        return Batch(items=[n], cursor=f"evt-{n + 1}") if n < 12 else Batch([], cursor)

    declare(
        "t.cons.keyed",
        fetch=numbered,
        handle=lambda items: None,
        start="evt-8",
        order=lambda c: int(c.split("-")[1]),  # "evt-10" after "evt-9"
    )
    run_consumer("t.cons.keyed")
    _drain(pg_driver)
    assert (_row("t.cons.keyed").cursor, _row("t.cons.keyed").state) == (
        "evt-12",
        "idle",
    )


def test_a_batch_fetched_after_a_cursor_another_run_moved_is_not_handled(
    declare, pg_driver
):
    """Compare-and-set on the cursor: a run commits a batch only if nothing
    moved the cursor since it fetched; then it yields."""
    ids = _events(5)

    def fetch_while_another_commits(cursor):
        batch = read_events(cursor)
        # Meanwhile another run (another process) commits the same batch.
        Consumer.objects.filter(name="t.cons.cas").update(
            cursor=batch.cursor, version=1
        )
        StreamEffect.objects.bulk_create(
            StreamEffect(consumer="t.cons.cas", event_id=i) for i in batch.items
        )
        return batch

    declare("t.cons.cas", fetch=fetch_while_another_commits)
    (execution,) = (run_consumer("t.cons.cas"), _drain(pg_driver))[1]
    assert execution.result["ended"] == "cursor-moved"
    assert _handled("t.cons.cas") == dict.fromkeys(ids, 1)


def test_poll_waits_and_fetches_again_until_run_for_passes(declare, pg_driver):
    first = _events(3)
    late: list[int] = []

    def fetch(cursor):
        batch = read_events(cursor)
        if not batch.items and not late:
            late.extend(_events(2))  # arrives while the run waits
        return batch

    declare("t.cons.poll", fetch=fetch, poll="20ms", run_for="300ms")
    run_consumer("t.cons.poll")
    (execution,) = _drain(pg_driver)
    assert _handled("t.cons.poll") == dict.fromkeys(first + late, 1)
    assert execution.result["ended"] == "caught-up"
    assert execution.result["batches"] == 2


# -- pause, resume, cursor, supervisor -----------------------------------------------------


def test_pause_resume_and_set_cursor_move_only_from_their_states(declare, pg_driver):
    declare("t.cons.ops")
    pause_consumer("t.cons.ops")
    for verb, code in (
        (lambda: pause_consumer("t.cons.ops"), "X_CONSUMER_STATE_INVALID"),
        (lambda: run_consumer("t.cons.ops"), "X_CONSUMER_STATE_INVALID"),
        (lambda: set_consumer_cursor("t.cons.ops", float("nan")), "X_CONSUMER_CURSOR_INVALID"),
        (lambda: pause_consumer("t.cons.nope"), "X_CONSUMER_UNKNOWN"),
    ):  # fmt: skip
        with pytest.raises(JobsError) as refused:
            verb()
        assert refused.value.code == code
    set_consumer_cursor("t.cons.ops", 0)
    assert (_row("t.cons.ops").cursor, _row("t.cons.ops").version) == (0, 1)
    resume_consumer("t.cons.ops")
    with pytest.raises(JobsError, match="X_CONSUMER_STATE_INVALID"):
        resume_consumer("t.cons.ops")
    with pytest.raises(JobsError, match="X_CONSUMER_STATE_INVALID"):
        set_consumer_cursor("t.cons.ops", 5)  # idle: pause it first
    assert _row("t.cons.ops").state == "idle"


def test_the_supervisor_starts_one_run_and_skips_a_live_paused_or_halted_one(
    declare, pg_driver, clock
):
    spec = declare("t.cons.sup")
    ids = _events(4)
    task = get_task(spec.job_name)

    def fire():
        clock.advance(minutes=1)
        return run_scheduler(tasks=[task], driver=pg_driver)

    fire()  # the first tick arms the task's watermark
    fire()
    jobs = Job.objects.filter(name=spec.job_name)
    assert jobs.count() == 1 and jobs.get().enqueued_by == f"task:{spec.job_name}"
    fire()  # that run is live: no second one
    assert jobs.count() == 1
    _drain(pg_driver)
    assert _handled("t.cons.sup") == dict.fromkeys(ids, 1)

    pause_consumer("t.cons.sup")
    fire()
    assert jobs.count() == 1
    resume_consumer("t.cons.sup")
    fire()
    assert jobs.count() == 2


# -- the command ---------------------------------------------------------------------------


def _command(*args: str) -> str:
    out = StringIO()
    call_command("jobs_consumer", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_the_command_lists_pauses_sets_the_cursor_and_resumes(declare, pg_driver):
    declare("t.cons.cmd")
    ids = _events(3)
    assert "t.cons.cmd: idle, cursor 0, 0 items in 0 batches" in _command()
    out = _command("t.cons.cmd", "--run", "--no-follow")
    assert "t.cons.cmd: run queued as job" in out
    _drain(pg_driver)
    assert f"t.cons.cmd: idle, cursor {ids[-1]}, 3 items in 1 batches" in _command(
        "t.cons.cmd"
    )
    assert _command("t.cons.cmd", "--pause") == "t.cons.cmd: paused\n"
    assert "cursor 0, 3 items" in _command("t.cons.cmd", "--set-cursor", "0")
    assert "resumed" in _command("t.cons.cmd", "--resume")


def test_the_command_follows_a_run_with_items_and_no_total(declare, pg_driver):
    from django_ultimate_jobs.management.commands.jobs_consumer import Command

    declare("t.cons.follow")
    _events(12)
    enqueued = run_consumer("t.cons.follow")
    _drain(pg_driver)
    command = Command(stdout=StringIO())
    command._follow("t.cons.follow", enqueued)
    text = command.stdout._out.getvalue()
    assert "\r" not in text  # off a terminal: plain lines
    assert "t.cons.follow: 12 items" in text and "rows" not in text
    assert text.rstrip().endswith("t.cons.follow: idle, 12 items in 2 batches")


def test_on_a_terminal_a_run_shows_items_and_rate_without_a_bar():
    from django_ultimate_jobs.management.commands.jobs_consumer import _RunRow
    from django_ultimate_jobs.management.progress import OpenProgress

    screen, stdout = terminal()
    progress = OpenProgress(stdout, "billing.stripe")
    progress.show(_RunRow(state="running", rows_done=0, pages_done=0))
    # As if it began 2,000 s ago (a slow machine's milliseconds do not count).
    progress.first = (progress.first[0] - 2000.0, 0)
    progress.show(_RunRow(state="running", rows_done=900_000, pages_done=9000))
    last = screen.getvalue().split("\r")[-1]
    assert last == "billing.stripe: 900,000 items, 450 items/s\x1b[K"  # no bar, no ETA


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("t.cons.nope",), "X_CONSUMER_UNKNOWN"),
        (("t.cons.refuse", "--set-cursor", "{bad"), "X_CONSUMER_CURSOR_INVALID"),
        (("t.cons.refuse", "--set-cursor", "5"), "X_CONSUMER_STATE_INVALID"),
        # order="natural" compares numbers or strings: the next fetch would halt.
        (("t.cons.refuse", "--set-cursor", "[1,2]"), "X_CONSUMER_CURSOR_INVALID"),
        (("t.cons.refuse", "--set-cursor", "true"), "X_CONSUMER_CURSOR_INVALID"),
        (("t.cons.refuse", "--set-cursor", '{"a": 1}'), "X_CONSUMER_CURSOR_INVALID"),
        (("t.cons.refuse", "--resume"), "X_CONSUMER_STATE_INVALID"),
    ],
)
def test_the_command_refuses_with_the_code(declare, args, code):
    declare("t.cons.refuse")
    with pytest.raises(CommandError, match=code):
        _command(*args)
    assert not Consumer.objects.exclude(state="idle").exists()


def test_the_command_refuses_bad_arguments_without_a_traceback(declare):
    declare("t.cons.args")
    with pytest.raises(CommandError, match="--pause needs a consumer NAME"):
        _command("--pause")
    with pytest.raises(CommandError, match="--no-follow is for --run"):
        _command("t.cons.args", "--no-follow")
    with pytest.raises(CommandError, match="not allowed with argument"):
        _command("t.cons.args", "--pause", "--resume")


# -- the admin -------------------------------------------------------------------------------


def test_the_admin_lists_cursors_and_pauses_and_resumes(declare, admin_client):
    from django.contrib.admin.models import LogEntry
    from django.urls import reverse

    declare("t.cons.admin")
    run_consumer("t.cons.admin")  # creates the row
    listing = reverse("admin:ultimate_jobs_consumer_changelist")
    page = admin_client.get(listing)
    assert page.status_code == 200 and "t.cons.admin" in page.text
    for query, status in (
        ({"state__exact": "idle"}, 200),
        ({"cursor__gt": "1"}, 400),
    ):
        assert admin_client.get(listing, query).status_code == status, query
    # A state that does not exist is an invalid filter, as on every list of
    # the app (ListGuard): the whole list under a note, never an empty one.
    refused = admin_client.get(listing, {"state": "bogus"})
    assert (refused.status_code, refused["Location"]) == (302, f"{listing}?e=1")

    form = {"action": "pause_selected", "_selected_action": ["t.cons.admin"]}
    asked = admin_client.post(listing, form)
    assert asked.status_code == 200 and _row("t.cons.admin").state == "idle"
    admin_client.post(listing, {**form, "confirmed": "yes"})
    assert _row("t.cons.admin").state == "paused"
    admin_client.post(
        listing,
        {"action": "resume_selected", "_selected_action": ["t.cons.admin"], "confirmed": "yes"},
    )  # fmt: skip
    assert _row("t.cons.admin").state == "idle"
    assert list(LogEntry.objects.values_list("change_message", flat=True)) == [
        "Consumer resumed (admin)",
        "Consumer paused (admin)",
    ]


def test_the_admin_verbs_need_the_change_permission(declare, client, db):
    from django.contrib.auth.models import Permission, User
    from django.urls import reverse

    declare("t.cons.perm")
    run_consumer("t.cons.perm")
    viewer = User.objects.create_user("c-viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_consumer"))
    client.force_login(viewer)
    listing = reverse("admin:ultimate_jobs_consumer_changelist")
    assert client.get(listing).status_code == 200
    form = {"action": "pause_selected", "_selected_action": ["t.cons.perm"], "confirmed": "yes"}  # fmt: skip
    assert client.post(listing, form).status_code == 403
    assert _row("t.cons.perm").state == "idle"
