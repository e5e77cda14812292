"""Row exports and imports: ``export_rows(...)`` and ``import_rows(...)``.

``export_rows(name=, model=, fields=, storage=, format="csv")`` declares an
export and the job that writes it, in resumable pages, as CSV or NDJSON
parts plus a manifest into a Django storage; ``import_rows(name=, model=,
storage=, key=)`` the job that checks a manifest against its parts and
loads them, idempotently. Importing this module touches no model.
"""

from __future__ import annotations

from .columns import Column
from .export import ExportHandle, export_rows, get_export, registered_exports
from .formats import neutralise, restore
from .imports import ImportHandle, get_import, import_rows, registered_imports
from .manifest import Manifest, Part

__all__ = [
    "Column",
    "ExportHandle",
    "ImportHandle",
    "Manifest",
    "Part",
    "export_rows",
    "get_export",
    "get_import",
    "import_rows",
    "neutralise",
    "registered_exports",
    "registered_imports",
    "restore",
]
