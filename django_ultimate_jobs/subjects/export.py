"""The export job's body: pages into parts, parts into one archive.

Each page of each table is serialised (Django's serializer, one JSON
object per row: ``model``, ``pk``, ``fields``) into a part row in the
page's own transaction. Once every table is walked, one step streams the
parts into a zip (``<app_label>.<Model>.json`` per table, a JSON array,
plus ``manifest.json``) spooled to disk past 8 MiB, and writes it to the
storage under a fixed name, so a replay replaces its own archive. The
last step drops the parts and clears the request's key.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from tempfile import SpooledTemporaryFile
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.core import serializers
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Sum
from django.db.models.functions import Now

from .declaration import Table
from .marks import personal_data_fields
from .run import advance, checked_subject, request_row, run_request, walk_table
from .storage import resolve_storage, store

if TYPE_CHECKING:
    from ..context import JobContext
    from .models import SubjectRequest

__all__ = ["ARCHIVE_PREFIX", "MANIFEST", "run_export"]

ARCHIVE_PREFIX = "subject-exports"
MANIFEST = "manifest.json"
FORMAT = "django-ultimate-jobs/subject-export"
FORMAT_VERSION = 1
SPOOL_BYTES = 8 * 1024 * 1024
"""The archive is built in memory up to this size, on disk past it."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_export(ctx: JobContext, request_id: str) -> dict[str, Any]:
    """Export the subject of request ``request_id`` into one archive."""
    return run_request(
        ctx, request_id, "export", lambda started: _export(ctx, request_id, started)
    )


def _export(
    ctx: JobContext, request_id: str, started: dict[str, Any]
) -> dict[str, Any]:
    rows = sum(
        walk_table(
            ctx, request_id, started, index, f"t{index}", Table.rows, _export_page
        )
        for index in range(len(started["tables"]))
    )
    archive = ctx.step.run("archive", _write_archive, request_id, started)
    ctx.step.run(
        "finish",
        _finish,
        request_id,
        started["tables"],
        archive["archive"],
        atomic=True,
    )
    return {"request": request_id, "archive": archive["archive"], "rows": rows}


def _export_page(
    row: SubjectRequest, table: Table, index: int, pks: list[Any], page: int
) -> None:
    """Serialise the page into a part row (in the page's step transaction)."""
    from .models import SubjectExportPart

    objects = table.model._base_manager.filter(pk__in=pks).order_by("pk")
    records = serializers.serialize("python", objects, fields=table.export)
    SubjectExportPart.objects.create(
        request_id=row.id,
        table=index,
        page=page,
        rows=len(pks),
        body="\n".join(
            json.dumps(record, cls=DjangoJSONEncoder, ensure_ascii=False)
            for record in records
        ),
    )
    advance(row.id, len(pks))


def archive_name(subject: str, request_id: str) -> str:
    """``subject-exports/<subject>/<request id>.zip`` (unsafe characters as ``-``)."""
    return f"{ARCHIVE_PREFIX}/{_UNSAFE.sub('-', subject)}/{request_id}.zip"


def _write_archive(request_id: str, started: dict[str, Any]) -> dict[str, Any]:
    from ..maintenance.instant import maintenance_now

    row = request_row(request_id)
    spec = checked_subject(row, started)
    storage = resolve_storage(spec.storage, row.storage)
    tables = []
    with SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        with zipfile.ZipFile(spool, "w", zipfile.ZIP_DEFLATED) as archive:
            for index, table in enumerate(spec.tables):
                member = f"{table.label}.json"
                with archive.open(member, "w", force_zip64=True) as raw:
                    count = _write_array(
                        io.TextIOWrapper(raw, "utf-8"), request_id, index
                    )
                tables.append(
                    {
                        "model": table.label,
                        "file": member,
                        "rows": count,
                        "fields": list(table.export),
                        "personal_data": personal_data_fields(table.model),
                        "erase": table.erase.describe(),
                    }
                )
            manifest = {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "subject": spec.name,
                "key": row.key,
                "request": request_id,
                "created_at": maintenance_now().isoformat(),
                "tables": tables,
            }
            archive.writestr(
                MANIFEST, json.dumps(manifest, indent=2, cls=DjangoJSONEncoder)
            )
        size = spool.tell()
        spool.seek(0)
        saved = store(storage, archive_name(spec.name, request_id), spool)
    return {"archive": saved, "bytes": size}


def _write_array(out: io.TextIOWrapper, request_id: str, index: int) -> int:
    """Write the table's parts as one JSON array, a part at a time."""
    count = 0
    out.write("[")
    for line in _lines(request_id, index):
        out.write(",\n" if count else "\n")
        out.write(line)
        count += 1
    out.write("\n]\n" if count else "]\n")
    out.flush()
    out.detach()  # leave the zip member for the `with` to close
    return count


def _lines(request_id: str, index: int) -> Iterator[str]:
    from .models import SubjectExportPart

    bodies = (
        SubjectExportPart.objects.filter(request_id=UUID(request_id), table=index)
        .order_by("page")
        .values_list("body", flat=True)
    )
    for body in bodies.iterator(chunk_size=20):
        yield from body.split("\n")


def _finish(request_id: str, labels: list[str], archive: str) -> None:
    from .models import SubjectExportPart, SubjectRequest

    parts = SubjectExportPart.objects.filter(request_id=UUID(request_id))
    per_table = dict(
        parts.values_list("table")
        .annotate(rows=Sum("rows"))
        .values_list("table", "rows")
    )
    parts.delete()
    SubjectRequest.objects.filter(id=request_id).update(
        state=SubjectRequest.State.DONE,
        archive=archive,
        key=None,
        summary=[
            {"model": label, "rows": int(per_table.get(index, 0))}
            for index, label in enumerate(labels)
        ],
        error="",
        finished_at=Now(),
        updated_at=Now(),
    )
