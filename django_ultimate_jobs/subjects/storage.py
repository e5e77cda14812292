"""The storage an export's archive goes to, and the writes it may refuse."""

from __future__ import annotations

from typing import Any

from django.core.files import File

from ..errors import JobsError
from .errors import SubjectStorageInvalid, SubjectStorageRefused

__all__ = ["resolve_storage", "store"]


def resolve_storage(declared: Any, alias: str = "") -> Any:
    """The ``Storage`` an export writes to.

    Args:
        declared: the subject's ``storage=`` (an alias or a callable).
        alias: a request's own alias ('' keeps the declared one).

    Raises:
        SubjectStorageInvalid: the alias is not in ``settings.STORAGES``,
            or the callable answered something that is not a ``Storage``.
    """
    from django.core.files.storage import Storage, storages
    from django.core.files.storage.handler import InvalidStorageError

    chosen = alias or declared
    if callable(chosen) and not isinstance(chosen, str):
        found = chosen()
        if not isinstance(found, Storage):
            raise SubjectStorageInvalid(
                f"the subject's storage callable answered a "
                f"{type(found).__name__}, not a Storage",
                meta={"storage": "callable"},
            )
        return found
    try:
        return storages[chosen]
    except InvalidStorageError:
        raise SubjectStorageInvalid(
            f"settings.STORAGES has no storage {chosen!r}",
            meta={"storage": str(chosen)[:100]},
        ) from None


def _refused(storage: Any, what: str, error: Exception) -> SubjectStorageRefused:
    kind = type(storage).__name__
    return SubjectStorageRefused(
        f"the {kind} storage refused to {what} the archive ({type(error).__name__})",
        meta={"storage": kind, "error": type(error).__name__},
    )


def store(storage: Any, name: str, content: Any) -> str:
    """Write ``content`` (a file object) as ``name``, replacing an earlier copy.

    A replayed write meets the copy an interrupted attempt left and
    replaces it, so the name stays the one asked for (``save()`` would
    otherwise pick a new one).

    Raises:
        SubjectStorageRefused: the storage raised (permissions,
            credentials, space, a network error).
    """
    try:
        if storage.exists(name):
            storage.delete(name)
    except JobsError:
        raise
    except Exception as error:
        raise _refused(storage, "replace", error) from error
    try:
        saved: str = storage.save(name, File(content))
    except JobsError:
        raise
    except Exception as error:
        raise _refused(storage, "write", error) from error
    return saved
