"""The coded errors of ``export_rows(...)`` and ``import_rows(...)``.

A message names the export, the part, the column and the row's key, never
a cell's value (it may be personal data).
"""

from __future__ import annotations

from ..errors import JobsError, RetryClass

__all__ = [
    "ExportDeclarationInvalid",
    "ExportPartTooLarge",
    "ExportRequestInvalid",
    "ExportRowInvalid",
    "ExportStorageRefused",
    "ExportUnknown",
    "ImportDeclarationInvalid",
    "ImportManifestInvalid",
    "ImportRequestInvalid",
    "ImportRowInvalid",
    "ImportUnknown",
]


class ExportDeclarationInvalid(JobsError):
    """An ``export_rows(...)`` declaration is invalid (an unknown model or field...)."""

    code = "X_EXPORT_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass name=, model=, fields= (its field names; a__b follows a foreign "
        'key), format="csv" or "ndjson" and storage= (a STORAGES alias)'
    )


class ExportUnknown(JobsError):
    """No export is declared under that name."""

    code = "X_EXPORT_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs_export --list  (lists the declared exports)"


class ExportRequestInvalid(JobsError):
    """An export was asked with a prefix or params it cannot take; nothing queued."""

    code = "X_EXPORT_REQUEST_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "write the prefix as path segments of letters, digits, '.', '_' and '-' "
        "(exports/2026-05-01); pass params the source= accepts"
    )


class ExportStorageRefused(JobsError):
    """The storage refused to write a part or the manifest."""

    code = "X_EXPORT_STORAGE_REFUSED"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "give the storage write access (or room) at that prefix, then run the "
        "export again: it goes on after its last part"
    )


class ExportRowInvalid(JobsError):
    """A row holds a value the format cannot write (a NaN, an unexpected type)."""

    code = "X_EXPORT_ROW_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = "fix the row the message names, or leave the column out of fields="


class ExportPartTooLarge(JobsError):
    """One page encoded is larger than ``max_part_bytes``."""

    code = "X_EXPORT_PART_TOO_LARGE"
    retry_class = RetryClass.TERMINAL
    default_fix = "lower batch= (rows per part) or raise max_part_bytes="


class ImportDeclarationInvalid(JobsError):
    """An ``import_rows(...)`` declaration is invalid (an unknown model or field...)."""

    code = "X_IMPORT_DECLARATION_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "pass name=, model=, storage= (a STORAGES alias) and key= (a unique "
        "field of the model)"
    )


class ImportUnknown(JobsError):
    """No import is declared under that name."""

    code = "X_IMPORT_UNKNOWN"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = "python manage.py jobs_import --list  (lists the declared imports)"


class ImportRequestInvalid(JobsError):
    """An import was asked with a prefix it cannot take; nothing queued."""

    code = "X_IMPORT_REQUEST_INVALID"
    retry_class = RetryClass.NOT_IN_JOB
    default_fix = (
        "write the prefix as the export's: path segments of letters, digits, "
        "'.', '_' and '-'"
    )


class ImportManifestInvalid(JobsError):
    """The manifest is missing or malformed, does not match its parts, or does
    not fit the model; nothing of the failing part is loaded."""

    code = "X_IMPORT_MANIFEST_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = (
        "export again to that prefix (python manage.py jobs_export <name> "
        "--prefix <prefix> --write --force), or import the prefix it was written to"
    )


class ImportRowInvalid(JobsError):
    """A cell cannot be read as its column's type, or the model refused the row."""

    code = "X_IMPORT_ROW_INVALID"
    retry_class = RetryClass.TERMINAL
    default_fix = "fix the part the message names (then export it again)"
