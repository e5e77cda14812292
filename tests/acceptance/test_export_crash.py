"""An export and its import each survive SIGKILLed workers, every row once.

Judged by the artifact and the tables: the manifest lists every part once
with checksums that match the files; the parts laid end to end hold every
exported row's key exactly once, in order; the import's target table holds
exactly the exported rows, with the same values (compared in SQL); the jobs
say done after as many attempts as there were workers.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path
from uuid import uuid4

import pytest
from django.db import connection

from django_ultimate_jobs.exports import get_export, get_import
from django_ultimate_jobs.models import Export, Import, Job
from tests.jobsapp.jobs import ITEM_FIELDS, exports_dir
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

NAME = "tests.items"  # export: group 1, CSV, batch=2000; import into ExportItemCopy
ROWS = 60_000
DEADLINE_S = 60.0
# Every column, as text, in key order: equal digests mean equal tables.
_DIGEST = (
    "SELECT md5(string_agg(concat_ws('|', id, grp, name, note, amount, ratio, flag, "
    "at, day, span, uid, data::text, owner_id), E'\\n' ORDER BY id)) FROM {table}"
)


@pytest.fixture
def prefix():
    chosen = f"crash/{uuid4().hex}"
    yield chosen
    shutil.rmtree(Path(exports_dir()) / chosen, ignore_errors=True)


def _seed() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobsapp_exportitem "
            "(grp, name, note, amount, ratio, flag, at, day, span, uid, data) "
            "SELECT 1, CASE WHEN n %% 7 = 0 THEN '=HYPERLINK(\"x\",' || n || ')' "
            "ELSE 'item ' || n END, "
            "CASE WHEN n %% 3 = 0 THEN NULL ELSE 'note ' || n END, "
            "n * 1.25, CASE WHEN n %% 4 = 0 THEN NULL ELSE n / 7.0 END, n %% 2 = 0, "
            "timestamptz '2026-01-01' + n * interval '1 second', "
            "date '2026-01-01' + n %% 365, n * interval '1 millisecond', "
            "md5(n::text)::uuid, CASE WHEN n %% 5 = 0 THEN NULL "
            "ELSE jsonb_build_object('n', n) END "
            "FROM generate_series(1, %s) AS n",
            [ROWS],
        )


def _digest(table: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(_DIGEST.format(table=table))
        (digest,) = cursor.fetchone()
    return digest


def _kill_at(fleet, name: str, model, prefix: str, rows: int) -> int:
    worker = fleet.start(name=name)
    wait_until(
        lambda: (
            (row := model.objects.filter(prefix=prefix).first()) is not None
            and row.rows_done >= rows
        ),
        DEADLINE_S,
        0.01,
        message=fleet.logs,
    )
    assert worker.kill() == -9
    return model.objects.get(prefix=prefix).rows_done


def _finish(fleet, name: str, model, prefix: str, job_id) -> None:
    """Start a worker and wait until the pass is done and its job settled
    (the pass row is written in the body, the job's state after it)."""
    fleet.start(name=name)
    wait_until(
        lambda: (
            model.objects.filter(prefix=prefix, state="done").exists()
            and Job.objects.filter(id=job_id, state="done").exists()
        ),
        DEADLINE_S,
        message=fleet.logs,
    )


def test_an_export_and_its_import_survive_killed_workers(fleet, prefix):
    _seed()
    export_job = get_export(NAME).enqueue(prefix=prefix).id
    killed = [
        _kill_at(fleet, "export-a", Export, prefix, 12_000),
        _kill_at(fleet, "export-b", Export, prefix, 36_000),
    ]
    _finish(fleet, "export-c", Export, prefix, export_job)
    fleet.kill_all()

    assert killed[0] < killed[1] < ROWS, killed  # both kills were mid-pass
    folder = Path(exports_dir()) / prefix
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["rows"] == ROWS and len(manifest["parts"]) == ROWS // 2000
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["manifest.json", *(p["name"] for p in manifest["parts"])]
    )
    whole = b""
    for part in manifest["parts"]:
        data = (folder / part["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == part["sha256"]
        whole += data
    records = list(csv.reader(io.StringIO(whole.decode(), newline="")))
    assert records[0] == ITEM_FIELDS
    keys = [int(record[0]) for record in records[1:]]
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM jobsapp_exportitem WHERE grp = 1 ORDER BY id")
        assert keys == [key for (key,) in cursor.fetchall()]  # every row once
    job = Job.objects.get(id=export_job)
    assert (job.state, job.attempt) == ("done", 3)

    import_job = get_import(NAME).enqueue(prefix=prefix).id
    killed_load = _kill_at(fleet, "import-a", Import, prefix, 20_000)
    _finish(fleet, "import-b", Import, prefix, import_job)

    assert killed_load < ROWS
    assert _digest("jobsapp_exportitemcopy") == _digest("jobsapp_exportitem")
    row = Import.objects.get(prefix=prefix)
    assert (row.rows_done, row.pages_done) == (ROWS, ROWS // 2000)
    job = Job.objects.get(id=import_job)
    assert (job.state, job.attempt) == ("done", 2)
