"""The Exports and Imports pages: each artifact's progress; pause and resume.

:class:`~.passes.PassAdmin` pages over the ``Export`` and ``Import`` rows
(one per name and prefix): read-only, with an export's parts listed on its
page; pause and resume for holders of ``ultimate_jobs.change_export`` /
``change_import``, through the declared export or import like
``jobs_export`` and ``jobs_import``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.http import HttpRequest

from ..errors import JobsError
from ..exports.errors import ExportUnknown, ImportUnknown
from ..exports.export import get_export
from ..exports.imports import get_import
from ..models import Export, ExportPart, Import
from .passes import PASS_FIELDS, PassAdmin
from .redacted import redacted_block

__all__ = ["ExportAdmin", "ImportAdmin"]


class ExportPartInline(admin.TabularInline):
    """The parts an export wrote (read-only)."""

    model = ExportPart
    fields = ("index", "rows", "bytes", "sha256")
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Parts come from the pass."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Read-only."""
        return False


@admin.register(Export)
class ExportAdmin(PassAdmin):
    """Exports: progress per artifact; pause / resume for ``change_export``."""

    kind = "export"
    operate_permission = "ultimate_jobs.change_export"
    list_display = (
        "name",
        "prefix",
        "format",
        "state",
        "progress",
        "pages_done",
        "bytes",
        "finished_at",
        "error",
    )
    fields = ("name", "prefix", "format", "redacted_params", "bytes", *PASS_FIELDS)
    readonly_fields: ClassVar[tuple[str, ...]] = (
        "redacted_params",
        *PassAdmin.readonly_fields,
    )
    ordering = ("name", "prefix")
    inlines = (ExportPartInline,)

    @admin.display(description="params")
    def redacted_params(self, row: Export) -> str:
        """The source's keyword arguments, ``REDACT_KEYS`` values redacted."""
        return redacted_block(row.params)

    def pause_row(self, row: Export) -> None:
        """The export's ``pause(prefix)``."""
        get_export(row.name).pause(row.prefix)

    def resume_row(self, row: Export) -> Any:
        """The export's ``resume(prefix)``."""
        return get_export(row.name).resume(row.prefix)

    def unknown(self, value: str) -> JobsError:
        """``X_EXPORT_UNKNOWN``."""
        return ExportUnknown(f"no export artifact has the id {value!r}")


@admin.register(Import)
class ImportAdmin(PassAdmin):
    """Imports: progress per artifact; pause / resume for ``change_import``."""

    kind = "import"
    operate_permission = "ultimate_jobs.change_import"
    list_display = (
        "name",
        "prefix",
        "state",
        "progress",
        "pages_done",
        "finished_at",
        "error",
    )
    fields = ("name", "prefix", *PASS_FIELDS)
    ordering = ("name", "prefix")

    def pause_row(self, row: Import) -> None:
        """The import's ``pause(prefix)``."""
        get_import(row.name).pause(row.prefix)

    def resume_row(self, row: Import) -> Any:
        """The import's ``resume(prefix)``."""
        return get_import(row.name).resume(row.prefix)

    def unknown(self, value: str) -> JobsError:
        """``X_IMPORT_UNKNOWN``."""
        return ImportUnknown(f"no import artifact has the id {value!r}")
