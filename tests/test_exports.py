"""export_rows() and import_rows(): parts and a manifest in a Django storage,
every column type round-tripped through CSV and NDJSON, formula-injection
safety, the manifest checked against its parts before anything loads,
idempotent loads, refusals, the commands and the admin; on PostgreSQL
through the real worker path."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path
from uuid import uuid4

import pytest
from django.contrib.auth.models import User
from django.core.files.storage import FileSystemStorage
from django.core.management import CommandError, call_command

from django_ultimate_jobs import Retry
from django_ultimate_jobs.exports import export_rows, import_rows, neutralise, restore
from django_ultimate_jobs.exports.errors import (
    ExportDeclarationInvalid,
    ExportRequestInvalid,
    ImportDeclarationInvalid,
)
from django_ultimate_jobs.exports.export import unregister_export
from django_ultimate_jobs.exports.imports import unregister_import
from django_ultimate_jobs.keyset.errors import PassApplied
from django_ultimate_jobs.models import Export, ExportPart, Import, Job, Step
from django_ultimate_jobs.testing import run_jobs
from tests.jobsapp.jobs import ITEM_FIELDS
from tests.jobsapp.models import Article, ExportItem, ExportItemCopy

pytestmark = pytest.mark.django_db

GROUP = 7  # the items these tests export (the acceptance tier uses 1)
TRICKY = [
    '=HYPERLINK("http://evil.example/?x=1","click me")',
    "+1",
    "-1",
    "@SUM(A1)",
    "\tindented",
    "\rreturn",
    "'quoted",
    "''",
    "'",
    "",
    "plain, with a comma",
    'a "quote"',
    "two\nlines",
    "ünïcödé ☃",
]


@pytest.fixture
def storage(tmp_path) -> FileSystemStorage:
    return FileSystemStorage(location=str(tmp_path))


@pytest.fixture
def declare(pg_driver, storage):
    """``declare.export(name, **options)`` / ``declare.imports(...)``, forgotten after."""
    exports: list[str] = []
    imports: list[str] = []

    class Declare:
        @staticmethod
        def export(name: str, **options):
            options.setdefault("model", ExportItem)
            options.setdefault("fields", ITEM_FIELDS)
            options.setdefault("storage", storage)
            options.setdefault(
                "source",
                lambda group=str(GROUP): ExportItem.objects.filter(grp=int(group)),
            )
            options.setdefault("batch", 10)
            handle = export_rows(name=name, **options)
            exports.append(name)
            return handle

        @staticmethod
        def imports(name: str, **options):
            options.setdefault("model", ExportItemCopy)
            options.setdefault("storage", storage)
            handle = import_rows(name=name, **options)
            imports.append(name)
            return handle

    yield Declare
    for name in exports:
        unregister_export(name)
    for name in imports:
        unregister_import(name)


def _items(count: int, **fields) -> list[ExportItem]:
    owner = User.objects.create(username=f"owner-{uuid4().hex[:8]}")
    return ExportItem.objects.bulk_create(
        ExportItem(
            grp=GROUP,
            name=TRICKY[n % len(TRICKY)],
            note=None if n % 3 == 0 else TRICKY[(n + 5) % len(TRICKY)],
            amount=Decimal(f"{n - 7}.25"),
            ratio=None if n % 4 == 0 else n / 7,
            flag=n % 2 == 0,
            at=None
            if n % 5 == 0
            else datetime(2026, 1, 1, tzinfo=UTC)
            + timedelta(minutes=n, microseconds=n),
            day=date(2026, 1, 1) + timedelta(days=n),
            span=timedelta(seconds=-n, microseconds=7 * n),
            uid=uuid4(),
            data=None if n % 2 else {"n": n, "cell": "=1+1", "list": [1, "-2"]},
            owner=owner if n % 2 else None,
            **fields,
        )
        for n in range(count)
    )


def _drain(pg_driver):
    return run_jobs(queues=["ultimate_jobs"], driver=pg_driver)


def _values(model) -> list[tuple]:
    names = [("owner_id" if f == "owner" else f) for f in ITEM_FIELDS]
    return list(model.objects.order_by("id").values_list(*names))


def _manifest(storage, prefix: str) -> dict:
    with storage.open(f"{prefix}/manifest.json", "rb") as file:
        return json.load(file)


def _part(storage, prefix: str, index: int, fmt: str = "csv") -> bytes:
    with storage.open(f"{prefix}/part-{index:05d}.{fmt}", "rb") as file:
        return file.read()


def _rewrite(storage, name: str, data: bytes) -> None:
    storage.delete(name)
    storage.save(name, io.BytesIO(data))


def _command(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _export(declare, pg_driver, name: str, prefix: str, count: int = 23, **options):
    handle = declare.export(name, **options)
    _items(count)
    handle.enqueue(prefix=prefix)
    _drain(pg_driver)
    return handle


# -- the export ---------------------------------------------------------------------


def test_an_export_writes_its_pages_as_parts_and_a_manifest_last(
    declare, pg_driver, storage
):
    handle = _export(declare, pg_driver, "t.ex.parts", "out/parts")

    manifest = _manifest(storage, "out/parts")
    assert [p["name"] for p in manifest["parts"]] == [
        "part-00000.csv",
        "part-00001.csv",
        "part-00002.csv",
    ]
    assert [p["rows"] for p in manifest["parts"]] == [10, 10, 3]
    assert (manifest["rows"], manifest["format"], manifest["export"]) == (
        23,
        "csv",
        handle.name,
    )
    assert manifest["columns"][:3] == [
        {"name": "id", "type": "integer", "nullable": False},
        {"name": "grp", "type": "integer", "nullable": False},
        {"name": "name", "type": "string", "nullable": False},
    ]
    assert {c["name"]: c["type"] for c in manifest["columns"]}["owner"] == "integer"
    for index, listed in enumerate(manifest["parts"]):
        data = _part(storage, "out/parts", index)
        assert listed["bytes"] == len(data)
        assert listed["sha256"] == hashlib.sha256(data).hexdigest()
    # The header is in part 0 only: the parts laid end to end are one CSV.
    whole = b"".join(_part(storage, "out/parts", n) for n in range(3)).decode()
    records = list(csv.reader(io.StringIO(whole, newline="")))
    assert records[0] == ITEM_FIELDS and len(records) == 24
    assert [int(r[0]) for r in records[1:]] == sorted(
        ExportItem.objects.values_list("id", flat=True)
    )
    row = Export.objects.get(name=handle.name, prefix="out/parts")
    assert (row.state, row.rows_done, row.pages_done, row.total) == ("done", 23, 3, 23)
    assert row.bytes == manifest["bytes"] == sum(p["bytes"] for p in manifest["parts"])
    job = Job.objects.get(name=handle.job.name)
    assert sorted(
        Step.objects.filter(run_id=job.run_id).values_list("name", flat=True)
    ) == ["finish", "part-0", "part-1", "part-2", "start"]
    assert (job.progress["done"], job.progress["total"]) == (23, 23)  # the job page's


def test_a_formula_cell_is_neutralised_in_the_file_and_round_trips(
    declare, pg_driver, storage
):
    _export(declare, pg_driver, "t.ex.formula", "out/formula", count=len(TRICKY))
    text = b"".join(_part(storage, "out/formula", n) for n in range(2)).decode()
    cells = [
        cell for record in csv.reader(io.StringIO(text, newline="")) for cell in record
    ]
    # No cell a spreadsheet would run: each such text starts with an apostrophe.
    texts = [c for c in cells if c and not c.lstrip("-").replace(".", "").isdigit()]
    assert not [c for c in texts if c[0] in "=+-@\t\r"]
    assert "'" + TRICKY[0] in cells  # '=HYPERLINK("http://evil.example/...","click me")

    load = declare.imports("t.ex.formula")
    load.enqueue(prefix="out/formula")
    _drain(pg_driver)
    assert (
        list(ExportItemCopy.objects.order_by("id").values_list("name", flat=True))
        == TRICKY
    )


@pytest.mark.parametrize("text", [*TRICKY, "'=", "''=", "=", "-", "'-1"])
def test_neutralise_and_restore_are_inverse_and_leave_no_formula(text):
    written = neutralise(text)
    assert restore(written) == text
    assert not written or written[0] not in "=+-@\t\r"


@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_every_column_type_round_trips_through_an_import(
    declare, pg_driver, storage, fmt
):
    _export(declare, pg_driver, f"t.ex.trip-{fmt}", f"out/{fmt}", count=31, format=fmt)
    load = declare.imports(f"t.ex.trip-{fmt}")
    assert "check out: would load 31 rows" in _command(
        "jobs_import", load.name, "--prefix", f"out/{fmt}"
    )
    assert not ExportItemCopy.objects.exists()  # the dry run loads nothing

    load.enqueue(prefix=f"out/{fmt}")
    _drain(pg_driver)

    assert _values(ExportItemCopy) == _values(ExportItem)
    row = Import.objects.get(name=load.name)
    assert (row.state, row.rows_done, row.total, row.pages_done) == ("done", 31, 31, 4)
    # The key's sequence follows the loaded keys: the app's next row fits.
    fresh = ExportItemCopy.objects.create(name="after the import")
    assert fresh.pk > max(ExportItem.objects.values_list("id", flat=True))


def test_an_ndjson_part_is_one_object_a_line_in_column_order(
    declare, pg_driver, storage
):
    _export(declare, pg_driver, "t.ex.ndjson", "out/lines", count=3, format="ndjson")
    lines = _part(storage, "out/lines", 0, "ndjson").decode().split("\n")
    assert lines[-1] == "" and len(lines) == 4
    first = json.loads(lines[0])
    assert list(first) == ITEM_FIELDS
    assert first["amount"] == "-7.25" and first["name"] == TRICKY[0]  # no apostrophe


# -- the import -----------------------------------------------------------------------


def test_an_import_run_again_loads_nothing_twice(declare, pg_driver, storage):
    _export(declare, pg_driver, "t.ex.again", "out/again")
    load = declare.imports("t.ex.again")
    load.enqueue(prefix="out/again")
    _drain(pg_driver)
    with pytest.raises(PassApplied, match="X_PASS_APPLIED"):
        load.enqueue(prefix="out/again")

    ExportItemCopy.objects.filter(pk=ExportItem.objects.earliest("id").pk).update(
        name="changed since"
    )
    load.enqueue(prefix="out/again", force=True)
    _drain(pg_driver)
    assert ExportItemCopy.objects.count() == 23
    assert _values(ExportItemCopy) == _values(ExportItem)


def _corrupt_last_part(storage, prefix):
    data = bytearray(_part(storage, prefix, 2))
    data[-3] = ord("9") if data[-3] != ord("9") else ord("8")  # same size
    _rewrite(storage, f"{prefix}/part-00002.csv", bytes(data))


def _drop_part(storage, prefix):
    storage.delete(f"{prefix}/part-00001.csv")


def _cut_part(storage, prefix):
    _rewrite(storage, f"{prefix}/part-00002.csv", _part(storage, prefix, 2)[:-5])


def _miscount(storage, prefix):
    manifest = _manifest(storage, prefix)
    manifest["parts"][2]["rows"] -= 1
    manifest["rows"] -= 1
    _rewrite(storage, f"{prefix}/manifest.json", json.dumps(manifest).encode())


def _missum(storage, prefix):
    manifest = _manifest(storage, prefix)
    manifest["rows"] += 1
    _rewrite(storage, f"{prefix}/manifest.json", json.dumps(manifest).encode())


def _escape_prefix(storage, prefix):
    manifest = _manifest(storage, prefix)
    manifest["parts"][0]["name"] = "../../etc/passwd"
    _rewrite(storage, f"{prefix}/manifest.json", json.dumps(manifest).encode())


def _no_manifest(storage, prefix):
    storage.delete(f"{prefix}/manifest.json")


def _not_json(storage, prefix):
    _rewrite(storage, f"{prefix}/manifest.json", b"{not json")


@pytest.mark.parametrize(
    "damage, problem",
    [
        (_corrupt_last_part, "part-00002.csv' does not match its SHA-256"),
        (_drop_part, "part-00001.csv' is missing"),
        (_cut_part, "bytes, the manifest says"),
        (_miscount, "part-00002.csv' holds 3 rows, the manifest says 2"),
        (_missum, "says 24 rows in"),
        (_escape_prefix, "lists part 0 as"),
        (_no_manifest, "there is no 'out/damaged/manifest.json'"),
        (_not_json, "is not JSON"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[1:] or None,
)
def test_a_manifest_that_does_not_match_its_parts_loads_nothing(
    declare, pg_driver, storage, damage, problem
):
    _export(declare, pg_driver, "t.ex.damaged", "out/damaged")
    damage(storage, "out/damaged")
    load = declare.imports("t.ex.damaged", retry=Retry(attempts=3))

    with pytest.raises(CommandError, match="X_IMPORT_MANIFEST_INVALID") as refused:
        _command("jobs_import", load.name, "--prefix", "out/damaged")
    assert problem in str(refused.value)

    job_id = load.enqueue(prefix="out/damaged").id
    _drain(pg_driver)
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("dead", 1)  # terminal: no retry
    row = Import.objects.get(name=load.name)
    assert row.state == "failed" and problem in row.error
    assert not ExportItemCopy.objects.exists()  # not even the parts before it


def test_a_manifest_that_does_not_fit_the_model_is_refused(declare, pg_driver, storage):
    _export(declare, pg_driver, "t.ex.misfit", "out/misfit", count=3)
    load = declare.imports("t.ex.misfit", model=Article)
    with pytest.raises(CommandError, match="X_IMPORT_MANIFEST_INVALID") as refused:
        _command("jobs_import", load.name, "--prefix", "out/misfit")
    assert "its column 'note' is no field of jobsapp.Article" in str(refused.value)
    assert "its column 'grp' is" not in str(refused.value)  # same type: fits

    narrow = declare.imports("t.ex.narrow", model=Article, fields=["id", "grp"])
    narrow.enqueue(prefix="out/misfit")
    _drain(pg_driver)
    assert Article.objects.filter(grp=GROUP).count() == 3


def test_a_cell_an_import_cannot_read_names_its_line_and_column(
    declare, pg_driver, storage
):
    _export(declare, pg_driver, "t.ex.cell", "out/cell", count=3)
    manifest = _manifest(storage, "out/cell")
    text = _part(storage, "out/cell", 0).decode().replace(",-7.25,", ",seven,", 1)
    data = text.encode()
    manifest["parts"][0].update(
        bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    manifest["bytes"] = len(data)
    _rewrite(storage, "out/cell/part-00000.csv", data)
    _rewrite(storage, "out/cell/manifest.json", json.dumps(manifest).encode())
    load = declare.imports("t.ex.cell")
    with pytest.raises(CommandError, match="X_IMPORT_ROW_INVALID") as refused:
        _command("jobs_import", load.name, "--prefix", "out/cell")
    assert "part-00000.csv line 2, column 'amount': not a finite decimal" in str(
        refused.value
    )
    assert "seven" not in str(refused.value)  # never the value


def _set_cell(storage, prefix: str, column: str, text: str) -> None:
    """Change one cell of the last part's first row; size and SHA-256 in the
    manifest recomputed, so the artifact checks out but for that cell."""
    manifest = _manifest(storage, prefix)
    index = len(manifest["parts"]) - 1
    rows = list(
        csv.reader(io.StringIO(_part(storage, prefix, index).decode(), newline=""))
    )
    first = 1 if index == 0 else 0  # part 0 starts with the header
    rows[first][[c["name"] for c in manifest["columns"]].index(column)] = text
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    data = out.getvalue().encode()
    manifest["parts"][index].update(
        bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    manifest["bytes"] = sum(p["bytes"] for p in manifest["parts"])
    _rewrite(storage, f"{prefix}/part-{index:05d}.csv", data)
    _rewrite(storage, f"{prefix}/manifest.json", json.dumps(manifest).encode())


@pytest.mark.parametrize(
    "column, text, reason",
    [
        ("name", "'", "null, the field name is not nullable"),
        ("name", "x\x00y", "a NUL character"),
        ("note", "x\x00y", "a NUL character"),
        ("data", '{"a": "x\\u0000y"}', "a NUL character"),
        ("name", "n" * 201, "201 characters, over max_length=200"),
        (
            "amount",
            "1e30",
            "a decimal with 31 digits before the point, the field takes 10",
        ),
        ("amount", "1.234", "a decimal with 3 decimal places, the field keeps 2"),
        ("grp", "40000", "outside -32768..32767"),
        ("id", "99999999999999999999", "outside -9223372036854775808.."),
        ("id", str(2**63 - 1), "the range of a BigAutoField less its last value"),
    ],
    ids=[
        "null",
        "nul-char",
        "nul-text",
        "nul-json",
        "max-length",
        "digits",
        "places",
        "smallint",
        "bigint",
        "sequence-max",
    ],
)
def test_a_cell_its_field_cannot_take_is_refused_before_any_part_loads(
    declare, pg_driver, storage, column, text, reason
):
    _export(declare, pg_driver, "t.ex.fit", "out/fit")
    _set_cell(storage, "out/fit", column, text)
    load = declare.imports("t.ex.fit", retry=Retry(attempts=3))

    with pytest.raises(CommandError, match="X_IMPORT_ROW_INVALID") as refused:
        _command("jobs_import", load.name, "--prefix", "out/fit")
    message = str(refused.value)
    assert f"part-00002.csv line 1 (row 1), column {column!r}: " in message
    assert reason in message
    assert text not in message or text == "'"  # never the value

    job_id = load.enqueue(prefix="out/fit").id
    _drain(pg_driver)
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("dead", 1)
    assert Import.objects.get(name=load.name).error.startswith("X_IMPORT_ROW_INVALID")
    assert not ExportItemCopy.objects.exists()  # not even the parts before it
    assert not Step.objects.filter(run_id=job.run_id, name__startswith="load-").exists()


def test_a_key_twice_in_a_part_is_refused_before_any_part_loads(
    declare, pg_driver, storage
):
    """One upsert statement cannot update a row twice (a CardinalityViolation,
    retried): a part repeating a key is refused at the verify step."""
    _export(declare, pg_driver, "t.ex.twice", "out/twice")
    twin = _part(storage, "out/twice", 2).decode().split("\r\n")[1].split(",")[0]
    _set_cell(storage, "out/twice", "id", twin)
    load = declare.imports("t.ex.twice", retry=Retry(attempts=3))
    job_id = load.enqueue(prefix="out/twice").id
    _drain(pg_driver)
    assert Job.objects.get(id=job_id).state == "dead"
    error = Import.objects.get(name=load.name).error
    assert error.startswith("X_IMPORT_ROW_INVALID")
    assert "part-00002.csv line 2 (row 2), column 'id': the key repeats" in error
    assert not ExportItemCopy.objects.exists()


def test_a_key_one_below_its_type_maximum_loads_and_the_next_insert_fits(
    declare, pg_driver, storage
):
    _export(declare, pg_driver, "t.ex.top", "out/top", count=3)
    _set_cell(storage, "out/top", "id", str(2**63 - 2))
    load = declare.imports("t.ex.top")
    load.enqueue(prefix="out/top")
    _drain(pg_driver)
    row = Import.objects.get(name=load.name)
    assert row.state == "done", row.error
    assert ExportItemCopy.objects.create().pk == 2**63 - 1


def test_rows_the_database_refuses_fail_the_import_with_a_code(
    declare, pg_driver, storage
):
    """A foreign key to a row that is gone: refused at the insert, named by
    its constraint, never by its values; the part loads nothing."""
    _export(declare, pg_driver, "t.ex.fk", "out/fk", count=5)
    User.objects.filter(username__startswith="owner-").delete()
    load = declare.imports("t.ex.fk", retry=Retry(attempts=1))
    load.enqueue(prefix="out/fk")
    _drain(pg_driver)
    row = Import.objects.get(name=load.name)
    assert row.error.startswith("X_IMPORT_ROW_INVALID")
    assert (
        "part-00000.csv: the database refused its rows (IntegrityError on " in row.error
    )
    assert "owner_id" in row.error and "is not present" not in row.error
    assert not ExportItemCopy.objects.exists()


# -- failures, pauses and reruns ----------------------------------------------------------


def test_a_failed_export_goes_on_after_its_last_part(declare, pg_driver, storage):
    handle = declare.export("t.ex.resume", retry=Retry(attempts=1))
    rows = _items(25)
    ExportItem.objects.filter(pk=rows[14].pk).update(ratio=float("nan"))
    job_id = handle.enqueue(prefix="out/resume").id
    _drain(pg_driver)

    assert Job.objects.get(id=job_id).state == "dead"
    row = Export.objects.get(name=handle.name)
    assert row.state == "failed" and row.pages_done == 1
    assert row.error.startswith("X_EXPORT_ROW_INVALID")
    assert f"primary key {rows[14].pk}, column 'ratio'" in row.error
    assert not storage.exists("out/resume/manifest.json")

    ExportItem.objects.filter(pk=rows[14].pk).update(ratio=1.5)
    run_id = handle.enqueue(prefix="out/resume").run_id
    _drain(pg_driver)
    assert sorted(
        Step.objects.filter(run_id=run_id).values_list("name", flat=True)
    ) == ["finish", "part-1", "part-2", "start"]
    manifest = _manifest(storage, "out/resume")
    assert [p["rows"] for p in manifest["parts"]] == [10, 10, 5]
    whole = b"".join(_part(storage, "out/resume", n) for n in range(3)).decode()
    ids = [int(r[0]) for r in list(csv.reader(io.StringIO(whole, newline="")))[1:]]
    assert ids == [r.pk for r in rows]  # every row once


def test_a_forced_export_removes_the_parts_an_earlier_longer_one_left(
    declare, pg_driver, storage
):
    handle = _export(declare, pg_driver, "t.ex.shrink", "out/shrink")
    with pytest.raises(PassApplied, match="X_PASS_APPLIED"):
        handle.enqueue(prefix="out/shrink")
    ExportItem.objects.filter(
        pk__in=ExportItem.objects.order_by("id").values("id")[:15]
    ).delete()
    handle.enqueue(prefix="out/shrink", force=True)
    _drain(pg_driver)

    assert sorted(Path(storage.path("out/shrink")).iterdir()) == [
        Path(storage.path("out/shrink/manifest.json")),
        Path(storage.path("out/shrink/part-00000.csv")),
    ]
    assert _manifest(storage, "out/shrink")["rows"] == 8
    assert ExportPart.objects.filter(export__name=handle.name).count() == 1


def test_a_pause_stops_the_export_before_its_next_part_and_resume_goes_on(
    declare, pg_driver, storage
):
    def source(group=str(GROUP)):
        row = Export.objects.filter(name="t.ex.pause").first()
        if row is not None and row.pages_done == 1 and row.state == "running":
            handle.pause("out/pause")  # an operator, between parts
        return ExportItem.objects.filter(grp=int(group))

    handle = declare.export("t.ex.pause", source=source)
    _items(25)
    handle.enqueue(prefix="out/pause")
    _drain(pg_driver)
    row = Export.objects.get(name=handle.name)
    assert (row.state, row.pages_done) == ("paused", 2)  # part 1 was running
    assert not storage.exists("out/pause/manifest.json")

    handle.resume("out/pause")
    _drain(pg_driver)
    assert Export.objects.get(name=handle.name).state == "done"
    assert [p["rows"] for p in _manifest(storage, "out/pause")["parts"]] == [10, 10, 5]


# -- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"model": "jobsapp.Nope"}, "model 'jobsapp.Nope' is unknown"),
        ({"fields": ["id", "nmae"]}, "ExportItem has no field 'nmae'"),
        ({"fields": ["id", "owner__nope"]}, "auth.User has no field 'nope'"),
        ({"fields": ["id", "name__x"]}, "'name' is no foreign key to follow"),
        ({"fields": ["id", "id"]}, "fields names a field twice"),
        ({"fields": []}, "fields must be a non-empty list"),
        ({"format": "xlsx"}, "format must be one of csv, ndjson"),
        ({"storage": 5}, "storage must be a STORAGES alias"),
        ({"batch": 0}, "batch must be a whole number >= 1"),
        ({"max_part_bytes": -1}, "max_part_bytes must be a whole number >= 1"),
        ({"rate": 0}, "rate must be a number of pages/s"),
    ],
)
def test_a_bad_export_declaration_is_refused_before_anything_is_registered(
    declare, options, problem
):
    with pytest.raises(ExportDeclarationInvalid, match=problem) as refused:
        declare.export("t.ex.bad", **options)
    assert refused.value.code == "X_EXPORT_DECLARATION_INVALID"
    with pytest.raises(CommandError, match="X_EXPORT_UNKNOWN"):
        _command("jobs_export", "t.ex.bad", "--prefix", "x")


@pytest.mark.parametrize(
    "prefix, params, code, problem",
    [
        ("../up", {}, "X_EXPORT_REQUEST_INVALID", "the prefix '../up' is not"),
        ("/abs", {}, "X_EXPORT_REQUEST_INVALID", "is not path segments"),
        ("a//b", {}, "X_EXPORT_REQUEST_INVALID", "is not path segments"),
        ("a b", {}, "X_EXPORT_REQUEST_INVALID", "is not path segments"),
        ("ok", {"colour": "red"}, "X_EXPORT_REQUEST_INVALID", "source() does not take"),
    ],
)
def test_a_bad_request_is_refused_before_anything_is_written(
    declare, storage, prefix, params, code, problem
):
    handle = declare.export("t.ex.request")
    with pytest.raises(ExportRequestInvalid, match=code) as refused:
        handle.enqueue(prefix=prefix, params=params)
    assert problem in str(refused.value)
    assert not Export.objects.exists() and not Job.objects.exists()


def test_an_unknown_storage_alias_is_refused_at_the_enqueue(declare):
    handle = declare.export("t.ex.alias", storage="no-such-alias")
    with pytest.raises(
        ExportDeclarationInvalid, match="'no-such-alias' is not a STORAGES"
    ):
        handle.enqueue(prefix="out/alias")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "location", ["/sys/uj-export-test", "{tmp}/a-file/below"], ids=["eperm", "enotdir"]
)
def test_a_storage_that_refuses_writes_fails_the_export_with_a_code(
    declare, pg_driver, tmp_path, location
):
    (tmp_path / "a-file").write_text("a file, not a folder")
    refusing = FileSystemStorage(location=location.format(tmp=tmp_path))
    handle = declare.export("t.ex.refused", storage=refusing)
    _items(3)
    job_id = handle.enqueue(prefix="out/refused").id
    _drain(pg_driver)

    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("dead", 1)
    assert job.last_error.startswith("X_EXPORT_STORAGE_REFUSED: the storage of export")
    row = Export.objects.get(name=handle.name)
    assert row.state == "failed" and row.pages_done == 0


def test_a_part_over_its_byte_limit_is_refused_with_the_batch_to_lower(
    declare, pg_driver
):
    handle = declare.export("t.ex.big", max_part_bytes=200, retry=Retry(attempts=1))
    _items(10)
    handle.enqueue(prefix="out/big")
    _drain(pg_driver)
    row = Export.objects.get(name=handle.name)
    assert row.error.startswith("X_EXPORT_PART_TOO_LARGE")
    assert "over max_part_bytes=200" in row.error


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"model": "jobsapp.Nope"}, "model 'jobsapp.Nope' is unknown"),
        ({"key": "name"}, "key 'name' is not unique in jobsapp.ExportItemCopy"),
        ({"key": "nope"}, "key 'nope': jobsapp.ExportItemCopy has no such field"),
        (
            {"fields": ["id", "nope"]},
            "field 'nope': jobsapp.ExportItemCopy has no such",
        ),
        ({"storage": None}, "storage must be a STORAGES alias"),
    ],
)
def test_a_bad_import_declaration_is_refused(declare, options, problem):
    with pytest.raises(ImportDeclarationInvalid, match=problem):
        declare.imports("t.ex.bad-import", **options)


def test_an_import_prefix_is_checked_like_an_exports(declare):
    load = declare.imports("t.ex.bad-prefix")
    with pytest.raises(CommandError, match="X_IMPORT_REQUEST_INVALID"):
        _command("jobs_import", load.name, "--prefix", "../x", "--write")
    assert not Import.objects.exists()


# -- the commands and the admin ----------------------------------------------------------


def test_the_export_command_dry_runs_passes_params_and_lists(
    declare, pg_driver, storage
):
    handle = declare.export("t.ex.command")
    _items(23)
    assert "would write 23 rows in 3 parts" in _command(
        "jobs_export", handle.name, "--prefix", "out/cmd", "--param", f"group={GROUP}"
    )
    assert "would write 0 rows" in _command(
        "jobs_export", handle.name, "--prefix", "out/cmd", "--param", "group=99"
    )
    assert not Export.objects.exists()
    out = _command(
        "jobs_export",
        handle.name,
        "--prefix",
        "out/cmd",
        "--param",
        "group=99",
        "--write",
        "--no-follow",
    )
    assert "pass queued as job" in out
    _drain(pg_driver)
    assert Export.objects.get(name=handle.name).params == {"group": "99"}
    assert "  out/cmd: done, 0/0 rows, 0 parts" in _command("jobs_export", "--list")
    with pytest.raises(CommandError, match="--param takes KEY=VALUE"):
        _command("jobs_export", handle.name, "--prefix", "p", "--param", "nokey")
    with pytest.raises(CommandError, match="--prefix is required"):
        _command("jobs_export", handle.name)


def test_the_admin_lists_exports_with_their_parts_and_pauses_them(
    declare, pg_driver, admin_client
):
    from django.urls import reverse

    handle = _export(declare, pg_driver, "t.ex.admin", "out/admin")
    row = Export.objects.get(name=handle.name)
    listing = admin_client.get(reverse("admin:ultimate_jobs_export_changelist"))
    assert listing.status_code == 200 and "out/admin" in listing.text
    page = admin_client.get(reverse("admin:ultimate_jobs_export_change", args=[row.pk]))
    assert page.status_code == 200
    assert hashlib.sha256(_part_bytes(handle, 0)).hexdigest() in page.text
    # An id no row can have: Django's "does not exist" redirect, no traceback.
    assert (
        admin_client.get(
            reverse("admin:ultimate_jobs_export_change", args=["nope"])
        ).status_code
        == 302
    )

    Export.objects.filter(pk=row.pk).update(state="running")
    changelist = reverse("admin:ultimate_jobs_export_changelist")
    admin_client.post(
        changelist,
        {"action": "pause_selected", "_selected_action": [row.pk], "confirmed": "yes"},
    )
    assert Export.objects.get(pk=row.pk).state == "paused"
    answer = admin_client.post(
        changelist,
        {"action": "pause_selected", "_selected_action": ["x"], "confirmed": "yes"},
        follow=True,
    )
    assert "X_EXPORT_UNKNOWN" in answer.text
    assert (
        admin_client.get(reverse("admin:ultimate_jobs_import_changelist")).status_code
        == 200
    )


def _part_bytes(handle, index: int) -> bytes:
    return _part(handle.open_storage(), "out/admin", index)
