"""The manifest: what an export wrote, and what an import checks it against.

``<prefix>/manifest.json`` is written last, once every part is: its
presence means the artifact is whole. It lists the columns (the schema:
name, type, nullable) and every part with its row count, byte size and
SHA-256, so a part that is missing, cut short, changed or swapped is found
before it is loaded::

    {"kind": "django-ultimate-jobs.export", "version": 1,
     "export": "orders", "model": "shop.order", "run_id": "...",
     "prefix": "exports/2026-05", "format": "csv",
     "columns": [{"name": "id", "type": "integer", "nullable": false}, ...],
     "parts": [{"name": "part-00000.csv", "rows": 5000, "bytes": 412345,
                "sha256": "..."}, ...],
     "rows": 1000000, "bytes": 82469000, "completed_at": "2026-05-01T03:17:00+00:00"}
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.files.storage import Storage

from .columns import TYPES, Column
from .errors import ImportManifestInvalid
from .formats import FORMATS
from .storage import MANIFEST, part_file

__all__ = [
    "KIND",
    "VERSION",
    "Manifest",
    "Part",
    "build_manifest",
    "read_manifest",
    "read_part",
]

KIND = "django-ultimate-jobs.export"
VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Part:
    """One part as the manifest lists it."""

    name: str
    rows: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The manifest's form."""
        return {
            "name": self.name,
            "rows": self.rows,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """A parsed, checked manifest."""

    export: str
    model: str
    format: str
    columns: tuple[Column, ...]
    parts: tuple[Part, ...]
    rows: int
    bytes: int
    digest: str
    """The SHA-256 of the manifest's own bytes (a pass checks it did not change)."""


def build_manifest(
    *,
    export: str,
    model: str,
    run_id: str,
    prefix: str,
    format: str,
    columns: Sequence[Column],
    parts: Sequence[Part],
    completed_at: str,
) -> bytes:
    """The manifest's bytes."""
    document = {
        "kind": KIND,
        "version": VERSION,
        "export": export,
        "model": model,
        "run_id": run_id,
        "prefix": prefix,
        "format": format,
        "columns": [c.to_json() for c in columns],
        "parts": [p.to_json() for p in parts],
        "rows": sum(p.rows for p in parts),
        "bytes": sum(p.bytes for p in parts),
        "completed_at": completed_at,
    }
    return (json.dumps(document, ensure_ascii=False, indent=1) + "\n").encode()


def read_manifest(storage: Storage, prefix: str, *, what: str) -> Manifest:
    """Read and check ``<prefix>/manifest.json``.

    Raises:
        ImportManifestInvalid: it is missing, not JSON, or not a manifest
            whose parts add up (``what`` names the import in the message).
    """
    name = f"{prefix}/{MANIFEST}"
    if not storage.exists(name):
        raise _invalid(
            what,
            f"there is no {name!r}: the export is not finished, or was written "
            "to another prefix",
            problem="missing-manifest",
        )
    with storage.open(name, "rb") as file:
        data = file.read()
    try:
        document = json.loads(data)
    except ValueError:
        raise _invalid(what, f"{name!r} is not JSON", problem="malformed") from None
    return _checked(document, hashlib.sha256(data).hexdigest(), what=what)


def _checked(document: Any, digest: str, *, what: str) -> Manifest:
    def refuse(reason: str, problem: str = "malformed") -> ImportManifestInvalid:
        return _invalid(what, f"the manifest {reason}", problem=problem)

    if not isinstance(document, Mapping) or document.get("kind") != KIND:
        raise refuse(f"is not a {KIND} manifest")
    if document.get("version") != VERSION:
        raise refuse(f"is version {document.get('version')!r}, not {VERSION}")
    format = document.get("format")
    if format not in FORMATS:
        raise refuse(f"names the format {format!r}, not one of {', '.join(FORMATS)}")
    columns = _columns(document.get("columns"), refuse)
    parts = _parts(document.get("parts"), format, refuse)
    rows, size = document.get("rows"), document.get("bytes")
    if rows != sum(p.rows for p in parts) or size != sum(p.bytes for p in parts):
        raise refuse(
            f"says {rows!r} rows in {size!r} bytes, but its parts hold "
            f"{sum(p.rows for p in parts)} rows in {sum(p.bytes for p in parts)} bytes",
            problem="count",
        )
    return Manifest(
        export=str(document.get("export", "")),
        model=str(document.get("model", "")),
        format=format,
        columns=columns,
        parts=parts,
        rows=rows,
        bytes=size,
        digest=digest,
    )


def _columns(given: Any, refuse: Any) -> tuple[Column, ...]:
    if not isinstance(given, list) or not given:
        raise refuse("lists no columns")
    columns = []
    for entry in given:
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("name"), str)
            or not entry["name"]
            or entry.get("type") not in TYPES
            or not isinstance(entry.get("nullable"), bool)
        ):
            raise refuse(
                f"has a column that is not {{name, type, nullable}}: {entry!r:.120}"
            )
        columns.append(Column(entry["name"], entry["type"], entry["nullable"]))
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise refuse("names a column twice")
    return tuple(columns)


def _parts(given: Any, format: str, refuse: Any) -> tuple[Part, ...]:
    if not isinstance(given, list):
        raise refuse("lists no parts")
    parts = []
    for index, entry in enumerate(given):
        expected = part_file(index, format)
        if not isinstance(entry, Mapping) or entry.get("name") != expected:
            raise refuse(f"lists part {index} as {entry!r:.120}, not {expected!r}")
        rows, size, digest = entry.get("rows"), entry.get("bytes"), entry.get("sha256")
        if (
            isinstance(rows, bool)
            or not isinstance(rows, int)
            or rows < 0
            or isinstance(size, bool)
            or not isinstance(size, int)
            or size < 0
            or not isinstance(digest, str)
            or not _SHA256.fullmatch(digest)
        ):
            raise refuse(f"lists {expected!r} without whole rows, bytes and a sha256")
        parts.append(Part(expected, rows, size, digest))
    return tuple(parts)


def read_part(storage: Storage, prefix: str, part: Part, *, what: str) -> bytes:
    """The bytes of ``part``, checked against the manifest's size and SHA-256.

    Raises:
        ImportManifestInvalid: it is missing, or its size or checksum differ.
    """
    name = f"{prefix}/{part.name}"
    if not storage.exists(name):
        raise _invalid(what, f"the part {name!r} is missing", problem="missing-part")
    with storage.open(name, "rb") as file:
        data = file.read(part.bytes + 1)
    if len(data) != part.bytes:
        raise _invalid(
            what,
            f"the part {name!r} holds {'more than ' if len(data) > part.bytes else ''}"
            f"{len(data) if len(data) <= part.bytes else part.bytes} bytes, "
            f"the manifest says {part.bytes}",
            problem="bytes",
        )
    if hashlib.sha256(data).hexdigest() != part.sha256:
        raise _invalid(
            what, f"the part {name!r} does not match its SHA-256", problem="checksum"
        )
    return data


def _invalid(what: str, reason: str, *, problem: str) -> ImportManifestInvalid:
    return ImportManifestInvalid(f"{what}: {reason}", meta={"problem": problem})
