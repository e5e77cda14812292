"""Where parts go: a Django storage, named by a ``STORAGES`` alias.

A part's name is its page's index, so a replayed page overwrites its part
(delete, then save under the same name: a storage that renames instead is
refused). A storage that says no (permissions, a read-only or full disk, a
path it will not write) is a coded refusal; anything else it raises is
trouble a retry may get past, and is raised as it is.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import SuspiciousFileOperation
from django.core.files.base import ContentFile
from django.core.files.storage import Storage

from .errors import ExportStorageRefused

__all__ = [
    "MANIFEST",
    "PREFIX_RULE",
    "StorageRef",
    "delete",
    "part_file",
    "part_name",
    "prefix_problem",
    "resolve_storage",
    "storage_label",
    "storage_problem",
    "write",
]

MANIFEST = "manifest.json"
PREFIX_RULE = (
    "path segments of letters, digits, '.', '_' and '-' joined by '/', "
    "at most 200 characters, no segment '.' or '..'"
)
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_REFUSING = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}
    | {errno.ENOTDIR, errno.EISDIR}
)

StorageRef = str | Storage | Callable[[], Storage]
"""A ``STORAGES`` alias, a storage, or a callable answering one."""


def storage_label(ref: StorageRef) -> str:
    """How messages and the admin name a storage."""
    return ref if isinstance(ref, str) else type(ref).__name__


def storage_problem(ref: Any) -> str | None:
    """What makes ``ref`` no storage reference (checked at declaration)."""
    if (
        isinstance(ref, Storage)
        or (isinstance(ref, str) and ref)
        or (callable(ref) and not isinstance(ref, str))
    ):
        return None
    return "storage must be a STORAGES alias (or a Storage)"


def resolve_storage(ref: StorageRef) -> Storage | str:
    """The storage ``ref`` names, or what is wrong with it."""
    if isinstance(ref, Storage):
        return ref
    if isinstance(ref, str):
        from django.core.files.storage import InvalidStorageError, storages

        try:
            return storages[ref]
        except InvalidStorageError:
            return f"storage {ref!r} is not a STORAGES alias"
    if callable(ref):
        found = ref()
        if isinstance(found, Storage):
            return found
        return f"storage() answered a {type(found).__name__}, not a Storage"
    return f"storage must be a STORAGES alias or a Storage, got {ref!r:.80}"


def prefix_problem(prefix: Any) -> str | None:
    """What is wrong with an artifact prefix, or ``None``."""
    if not isinstance(prefix, str):
        return f"the prefix must be a string, got {type(prefix).__name__}"
    segments = prefix.split("/")
    if (
        not prefix
        or len(prefix) > 200
        or not all(_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments)
    ):
        return f"the prefix {prefix!r:.220} is not {PREFIX_RULE}"
    return None


def part_file(index: int, format: str) -> str:
    """``part-00042.<format>``: a part's name within its prefix."""
    return f"part-{index:05d}.{format}"


def part_name(prefix: str, index: int, format: str) -> str:
    """``<prefix>/part-00042.<format>``."""
    return f"{prefix}/{part_file(index, format)}"


def write(storage: Storage, name: str, data: bytes, *, what: str) -> None:
    """Store ``data`` under exactly ``name``, replacing what is there.

    Raises:
        ExportStorageRefused: the storage refused (``what`` names the pass).
    """
    try:
        if storage.exists(name):
            storage.delete(name)
        saved = storage.save(name, ContentFile(data))
    except SuspiciousFileOperation as error:
        raise _refused(what, name, f"it will not write there ({error})") from error
    except OSError as error:
        if error.errno not in _REFUSING:
            raise
        reason = error.strerror or type(error).__name__
        raise _refused(what, name, reason) from error
    if saved != name:
        storage.delete(saved)
        raise _refused(what, name, f"it saved it as {saved!r} instead")


def delete(storage: Storage, name: str) -> None:
    """Remove ``name`` if it is there."""
    if storage.exists(name):
        storage.delete(name)


def _refused(what: str, name: str, reason: str) -> ExportStorageRefused:
    return ExportStorageRefused(
        f"the storage of {what} refused to write {name!r}: {reason}",
        meta={"name": name},
    )
