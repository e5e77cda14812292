"""reindex(): the pass (rows, then the sweep, a step a page), the PostgreSQL and
memory engines behind one port, search helpers, sync(), pause and resume,
refusals, ``manage.py jobs_reindex`` and the admin page; on PostgreSQL through
the real worker path."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_ultimate_jobs import Retry
from django_ultimate_jobs.keyset.errors import PassPaused, PassStateInvalid
from django_ultimate_jobs.models import Job, Reindex, SearchDocument, Step
from django_ultimate_jobs.search import (
    Document,
    MemorySearchIndex,
    PostgresSearchIndex,
    reindex,
)
from django_ultimate_jobs.search.errors import (
    ReindexDeclarationInvalid,
    SearchConfigUnknown,
    SearchQueryInvalid,
)
from django_ultimate_jobs.search.reindex import (
    REINDEX_JOB_PREFIX,
    pause_reindex,
    resume_reindex,
    unregister_reindex,
)
from django_ultimate_jobs.testing import run_jobs
from tests.jobsapp.models import Article

pytestmark = pytest.mark.django_db

GROUP = 7  # the articles these tests index (the acceptance tier uses 1)


@pytest.fixture
def declare(pg_driver):
    """Declare reindexes over group-7 articles; each is forgotten afterwards."""
    names: list[str] = []

    def make(name: str, **options):
        options.setdefault("model", Article)
        options.setdefault("index", PostgresSearchIndex())
        options.setdefault("fields", {"title": "A", "body": "B"})
        options.setdefault("source", lambda: Article.objects.filter(grp=GROUP))
        options.setdefault("batch", 10)
        options.setdefault("rate", 1000)
        handle = reindex(name=name, **options)
        names.append(name)
        return handle

    yield make
    for name in names:
        unregister_reindex(name)


def _articles(count: int, **fields) -> list[Article]:
    return Article.objects.bulk_create(
        Article(grp=GROUP, title=f"article {n}", body="plain text", **fields)
        for n in range(count)
    )


def _drain(pg_driver):
    return run_jobs(queues=["ultimate_jobs"], driver=pg_driver)


def _documents(name: str) -> list[str]:
    return sorted(
        SearchDocument.objects.filter(index_name=name).values_list(
            "object_id", flat=True
        ),
        key=int,
    )


def _steps(name: str) -> list[str]:
    run_ids = Job.objects.filter(name=REINDEX_JOB_PREFIX + name).values("run_id")
    return list(Step.objects.filter(run_id__in=run_ids).values_list("name", flat=True))


def _command(*args: str) -> str:
    out = StringIO()
    call_command("jobs_reindex", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


# -- the pass ---------------------------------------------------------------------


def test_a_pass_indexes_every_row_a_step_a_page_then_sweeps(declare, pg_driver):
    handle = declare("t.ri.pages")
    rows = _articles(25)

    handle.enqueue()
    _drain(pg_driver)

    assert _documents(handle.name) == [str(row.pk) for row in rows]
    row = Reindex.objects.get(name=handle.name)
    assert (row.state, row.phase, row.rows_done, row.total, row.removed) == (
        "done",
        "sweep",
        25,
        25,
        0,
    )
    # Three pages of rows (the third short ends the phase), then the sweep
    # pages through the 25 documents it finds (numbered on from the rows').
    job = Job.objects.get(name=handle.job.name)
    assert job.progress["done"] == job.progress["total"] == 25
    assert job.progress["note"] == "sweep: 25 documents checked"
    rows_phase = ["start", "page-0", "page-1", "page-2"]
    sweep_phase = ["sweep", "sweep-3", "sweep-4", "sweep-5", "finish"]
    assert sorted(_steps(handle.name)) == sorted([*rows_phase, *sweep_phase])


def test_search_answers_the_matching_rows_best_first_as_a_queryset(declare, pg_driver):
    handle = declare("t.ri.search")
    title, body, neither = Article.objects.bulk_create(
        [
            Article(grp=GROUP, title="Running shoes", body="for the road"),
            Article(grp=GROUP, title="Socks", body="a runner's socks, for running"),
            Article(grp=GROUP, title="Hats", body="for the sun"),
        ]
    )
    handle.enqueue()
    _drain(pg_driver)

    found = handle.search("running")
    # The title weighs A, the body B: the title match ranks first; stemming
    # ("english") finds "running" and "runner's" as one word.
    assert list(found) == [title, body]
    assert found[0].search_rank > found[1].search_rank > 0
    # Lazy and composable: a narrower queryset, a slice, a count.
    assert list(
        handle.search("running", queryset=Article.objects.exclude(pk=title.pk))
    ) == [body]
    assert handle.search("running")[:1].get() == title
    assert handle.search("-socks running").count() == 1  # websearch syntax
    assert handle.search_ids("running", limit=1) == [title.pk]
    assert not handle.search("").exists()
    assert neither not in handle.search("for")  # a stop word matches nothing


def test_the_sweep_removes_documents_of_rows_gone_or_outside_the_source(
    declare, pg_driver
):
    handle = declare(
        "t.ri.sweep",
        source=lambda: Article.objects.filter(grp=GROUP, published=True),
    )
    rows = _articles(12)
    handle.enqueue()
    _drain(pg_driver)
    assert len(_documents(handle.name)) == 12

    Article.objects.filter(pk__in=[r.pk for r in rows[:3]]).delete()
    Article.objects.filter(pk__in=[r.pk for r in rows[3:5]]).update(published=False)
    handle.enqueue()  # a done reindex starts over
    _drain(pg_driver)

    assert _documents(handle.name) == [str(r.pk) for r in rows[5:]]
    row = Reindex.objects.get(name=handle.name)
    assert (row.state, row.rows_done, row.removed) == ("done", 7, 5)


def test_a_stale_document_never_replaces_a_newer_one():
    """The version guard, as a reindex page replayed after the row changed meets it."""
    index = PostgresSearchIndex(config="simple")
    newer = Document(id="1", fields={"title": "newer"}, weights={}, version=20)
    older = Document(id="1", fields={"title": "older"}, weights={}, version=10)
    index.upsert("t.ri.version", [newer])
    index.upsert("t.ri.version", [older])
    assert [hit.id for hit in index.search("t.ri.version", "newer", limit=5)] == ["1"]
    assert index.search("t.ri.version", "older", limit=5) == []
    same = Document(id="1", fields={"title": "same"}, weights={}, version=20)
    index.upsert("t.ri.version", [same])
    assert [hit.id for hit in index.search("t.ri.version", "same", limit=5)] == ["1"]


def test_a_declared_version_is_the_rows_updated_at(declare, pg_driver):
    handle = declare("t.ri.versioned", version="updated_at")
    (row,) = _articles(1)
    handle.enqueue()
    _drain(pg_driver)
    stored = SearchDocument.objects.get(index_name=handle.name)
    assert stored.version == round(row.updated_at.timestamp() * 1_000_000)


def test_sync_brings_some_rows_up_to_date_in_the_callers_transaction(
    declare, pg_driver
):
    from django.db import transaction

    handle = declare("t.ri.sync")
    first, second = _articles(2)
    handle.enqueue()
    _drain(pg_driver)

    with transaction.atomic():
        first.title = "renamed zeppelin"
        first.save()
        handle.sync([first.pk])  # as a post_save hook would
    assert list(handle.search("zeppelin")) == [first]
    gone = second.pk
    second.delete()
    handle.sync([gone])  # a deleted row: its document goes
    assert _documents(handle.name) == [str(first.pk)]


def test_another_engine_is_one_class_behind_the_same_declaration(declare, pg_driver):
    """The memory engine: the same pass, queried through ids."""
    engine = MemorySearchIndex()
    handle = declare("t.ri.memory", index=engine)
    rows = _articles(15)
    rows[4].title = "unique zebra"
    rows[4].save()
    handle.enqueue()
    _drain(pg_driver)

    assert engine.listed(handle.name, after=None, limit=100) == sorted(
        str(r.pk) for r in rows
    )
    assert set(engine.writes.values()) == {1}  # each document written once
    found = handle.search("zebra")
    assert list(found) == [rows[4]] and found[0].search_rank > 0
    assert handle.search_ids("article", limit=3) == sorted(r.pk for r in rows)[:3]
    assert not SearchDocument.objects.filter(index_name=handle.name).exists()


# -- pause and resume ---------------------------------------------------------------


def test_a_pause_stops_the_pass_before_its_next_page_and_resume_goes_on(
    declare, pg_driver
):
    class PausingIndex(PostgresSearchIndex):
        def upsert(self, index, documents):
            super().upsert(index, documents)
            if Reindex.objects.get(name=index).pages_done == 0:
                pause_reindex(index)  # an operator, while page 0 runs

    handle = declare("t.ri.pause", index=PausingIndex())
    _articles(30)
    handle.enqueue()
    _drain(pg_driver)

    row = Reindex.objects.get(name=handle.name)
    assert (row.state, row.rows_done) == ("paused", 10)
    assert len(_documents(handle.name)) == 10
    with pytest.raises(PassPaused, match="X_PASS_PAUSED"):
        handle.enqueue()
    with pytest.raises(PassStateInvalid, match="X_PASS_STATE_INVALID"):
        pause_reindex(handle.name)

    resume_reindex(handle.name)
    _drain(pg_driver)
    row = Reindex.objects.get(name=handle.name)
    assert (row.state, row.rows_done, row.pages_done) == ("done", 30, 3 + 3)
    assert len(_documents(handle.name)) == 30


def test_a_failed_pass_goes_on_after_its_cursor_unless_restarted(declare, pg_driver):
    class FailingIndex(PostgresSearchIndex):
        fail_at = 1

        def upsert(self, index, documents):
            if Reindex.objects.get(name=index).pages_done == self.fail_at:
                raise RuntimeError("the engine is down")
            super().upsert(index, documents)

    engine = FailingIndex()
    handle = declare("t.ri.fail", index=engine, retry=Retry(attempts=1))
    _articles(30)
    job_id = handle.enqueue().id
    _drain(pg_driver)
    assert Job.objects.get(id=job_id).state == "dead"
    row = Reindex.objects.get(name=handle.name)
    assert row.state == "failed" and "RuntimeError: the engine is down" in row.error
    assert row.rows_done == 10

    engine.fail_at = -1
    run_id = handle.enqueue().run_id  # goes on from row 10
    _drain(pg_driver)
    row = Reindex.objects.get(name=handle.name)
    assert (row.state, row.rows_done, row.total) == ("done", 30, 30)
    assert len(_documents(handle.name)) == 30
    pages = Step.objects.filter(run_id=run_id, name__startswith="page-")
    assert sorted(pages.values_list("name", flat=True)) == [
        "page-1",
        "page-2",
        "page-3",
    ]

    handle.enqueue(restart=True)  # done: from the first row again
    _drain(pg_driver)
    assert Reindex.objects.get(name=handle.name).rows_done == 30


# -- refusals -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"model": "jobsapp.Nope"}, "model 'jobsapp.Nope' is unknown"),
        ({"model": 42}, "model must be a model class"),
        ({"fields": ["title", "subtitle"]}, "Article has no field 'subtitle'"),
        ({"fields": {"title": "E"}}, "field weights must be A, B, C or D"),
        ({"fields": []}, "fields must name at least one field"),
        ({"fields": ["grp", "title__x"]}, "'title' is no foreign key to follow"),
        ({"version": "title"}, "version 'title' must be an integer, date or datetime"),
        ({"index": object()}, "index must be a search index"),
        (
            {"index": PostgresSearchIndex(config="english; drop")},
            "must name a text search",
        ),
        ({"batch": 0}, "batch must be a whole number >= 1"),
        ({"rate": 0}, "rate must be a number of pages/s"),
        ({"name": "t" * 179}, "name must be at most 178 characters"),
    ],
)
def test_a_bad_declaration_is_refused_before_anything_is_registered(
    pg_driver, options, problem
):
    arguments = {
        "name": "t.ri.bad",
        "model": Article,
        "index": PostgresSearchIndex(),
        "fields": ["title"],
        **options,
    }
    with pytest.raises(ReindexDeclarationInvalid, match=problem) as refused:
        reindex(**arguments)
    assert refused.value.code == "X_REINDEX_DECLARATION_INVALID"
    with pytest.raises(CommandError, match="X_REINDEX_UNKNOWN"):
        _command("t.ri.bad")


def test_a_source_that_cannot_be_paged_is_refused_before_anything_is_queued(declare):
    handle = declare("t.ri.sliced", source=lambda: Article.objects.all()[:5])
    with pytest.raises(CommandError, match="X_PASS_SOURCE_INVALID"):
        _command(handle.name, "--write")
    assert not Job.objects.filter(name=handle.job.name).exists()


@pytest.mark.parametrize(
    "query, limit",
    [(None, 5), ("a" * 1001, 5), ("a\x00b", 5), ("fine", 0), ("fine", True)],
)
def test_a_query_the_index_cannot_run_is_refused_with_a_code(declare, query, limit):
    handle = declare("t.ri.query")
    with pytest.raises(SearchQueryInvalid, match="X_SEARCH_QUERY_INVALID"):
        handle.search_ids(query, limit=limit)


def test_a_configuration_the_database_lacks_is_a_coded_terminal_failure(
    declare, pg_driver
):
    """A name is all the declaration can check (no database at import): the
    pass fails terminally with a code, not a retried ProgrammingError, and
    ``manage.py check --database`` names it."""
    from django.core import checks

    handle = declare(
        "t.ri.klingon",
        index=PostgresSearchIndex(config="klingon"),
        retry=Retry(attempts=3),
    )
    _articles(3)
    messages = checks.run_checks(tags=[checks.Tags.database], databases=["default"])
    (message,) = [m for m in messages if m.id == "ultimate_jobs.E301"]
    assert "X_SEARCH_CONFIG_UNKNOWN: reindex 't.ri.klingon'" in message.msg
    # Without --database, Django runs no database check: import stays offline.
    assert "ultimate_jobs.E301" not in [m.id for m in checks.run_checks()]

    job_id = handle.enqueue().id
    _drain(pg_driver)
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("dead", 1)  # terminal: no retry
    row = Reindex.objects.get(name=handle.name)
    assert row.state == "failed"
    assert row.error.startswith("X_SEARCH_CONFIG_UNKNOWN")
    with pytest.raises(SearchConfigUnknown, match="no text search configuration"):
        handle.search_ids("anything")


# -- the command and the admin -------------------------------------------------------


def test_the_command_dry_runs_runs_and_lists(declare, pg_driver):
    handle = declare("t.ri.command")
    _articles(15)
    assert "would index 15 rows in 2 pages of 10" in _command(handle.name)
    assert not Reindex.objects.filter(name=handle.name).exists()

    enqueued = handle.enqueue()
    _drain(pg_driver)
    from django_ultimate_jobs.management.commands.jobs_reindex import Command
    from django_ultimate_jobs.management.progress import Progress, follow

    out = StringIO()
    command = Command(stdout=out)
    follow(
        Progress(command.stdout, handle.name),
        enqueued,
        lambda: Reindex.objects.filter(name=handle.name).first(),
        what=handle.name,
        listing="",
    )
    assert out.getvalue().rstrip().endswith("t.ri.command: done, 15 rows in 4 pages")
    listed = _command("--list")
    assert "t.ri.command: done, 15/15 rows, 4 pages" in listed
    assert "0 documents removed" in listed


@pytest.mark.parametrize(
    "args, refusal",
    [
        ((), "give NAME or --list"),
        (("--list", "--write"), "--write runs NAME"),
        (("t.ri.usage", "--restart"), "--restart is for --write"),
    ],
)
def test_an_option_that_would_be_ignored_is_a_usage_error(declare, args, refusal):
    declare("t.ri.usage")
    with pytest.raises(CommandError, match=refusal):
        _command(*args)


def test_the_admin_lists_progress_and_pauses_and_resumes(
    declare, pg_driver, admin_client
):
    from django.urls import reverse

    handle = declare("t.ri.admin")
    _articles(5)
    handle.enqueue()
    _drain(pg_driver)
    Reindex.objects.filter(name=handle.name).update(state="running", rows_done=2)

    changelist = reverse("admin:ultimate_jobs_reindex_changelist")
    page = admin_client.get(changelist)
    assert page.status_code == 200 and "2 / 5 (40%)" in page.text
    form = {"action": "pause_selected", "_selected_action": [handle.name]}
    asked = admin_client.post(changelist, form)
    assert 'name="confirmed" value="yes"' in asked.text
    assert Reindex.objects.get(name=handle.name).state == "running"
    admin_client.post(changelist, {**form, "confirmed": "yes"})
    assert Reindex.objects.get(name=handle.name).state == "paused"
    admin_client.post(
        changelist,
        {
            "action": "resume_selected",
            "_selected_action": [handle.name],
            "confirmed": "yes",
        },
    )
    assert Reindex.objects.get(name=handle.name).state == "pending"
    detail = reverse("admin:ultimate_jobs_reindex_change", args=[handle.name])
    assert admin_client.get(detail).status_code == 200
    assert admin_client.post(detail, {"state": "done"}).status_code == 403
