"""What an erase does to a table: ``anonymize(...)``, ``DELETE``, ``retain(...)``.

An anonymised field gets a value computed in the database (one ``UPDATE``
per page, never a row loaded into Python), chosen per field:

- ``NULL``: ``NULL`` (the field must be ``null=True``);
- ``EMPTY``: ``''`` (a text field that is not unique);
- ``REDACT``: ``'erased'`` (``'erased@erased.invalid'`` for an email
  field), or ``'erased-<pk>'`` (``'erased-<pk>@erased.invalid'``) when the
  field is unique, so erased rows never collide;
- ``value(x)`` (or a plain constant): ``x`` (not on a unique field);
- any Django expression (``Concat(...)``, ``Value(...)``): as written.

Each policy is checked against its field where the subject is declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Cast, Concat

from .errors import SubjectDeclarationInvalid

__all__ = [
    "DELETE",
    "EMPTY",
    "NULL",
    "REDACT",
    "Anonymize",
    "Delete",
    "Policy",
    "Retain",
    "Treatment",
    "anonymize",
    "retain",
    "value",
]

REDACTED = "erased"
REDACTED_DOMAIN = "@erased.invalid"
"""``.invalid`` is reserved (RFC 2606): a redacted address never delivers."""
MAX_REASON_LENGTH = 200
# The longest text a primary key prints as, by kind (a bigint, a UUID).
_PK_CHARS = {"uuid": 36, "int": 20}


class Policy:
    """How :func:`anonymize` rewrites one field; ``name`` is what the audit records."""

    name = "policy"

    def __repr__(self) -> str:
        return self.name.upper()

    def problem(self, field: models.Field[Any, Any]) -> str | None:
        """Why this policy cannot be applied to ``field``, else ``None``."""
        return None

    def target(self, field: models.Field[Any, Any]) -> Any:
        """The value or expression ``field`` is set to."""
        raise NotImplementedError

    def treated(self, field: models.Field[Any, Any]) -> Q:
        """Rows whose ``field`` already holds the target (none left to treat)."""
        return Q(**{field.attname: self.target(field)})


def _is_text(field: models.Field[Any, Any]) -> bool:
    return isinstance(field, models.CharField | models.TextField)


class _Null(Policy):
    name = "null"

    def problem(self, field: models.Field[Any, Any]) -> str | None:
        return None if field.null else "NULL needs a field declared null=True"

    def target(self, field: models.Field[Any, Any]) -> Any:
        return None

    def treated(self, field: models.Field[Any, Any]) -> Q:
        return Q(**{f"{field.attname}__isnull": True})


class _Empty(Policy):
    name = "empty"

    def problem(self, field: models.Field[Any, Any]) -> str | None:
        if not _is_text(field):
            return "EMPTY is for text fields (use NULL or value(...))"
        if field.unique:
            return "EMPTY on a unique field would collide (use REDACT)"
        return None

    def target(self, field: models.Field[Any, Any]) -> Any:
        return ""


class _Redact(Policy):
    name = "redact"

    def problem(self, field: models.Field[Any, Any]) -> str | None:
        if not _is_text(field):
            return "REDACT is for text fields (use NULL or value(...))"
        longest = len(REDACTED) + (
            len(REDACTED_DOMAIN) if isinstance(field, models.EmailField) else 0
        )
        if field.unique:
            longest += 1 + _pk_chars(field.model)
        if field.max_length is not None and field.max_length < longest:
            return (
                f"REDACT writes up to {longest} characters, more than its "
                f"max_length of {field.max_length} (use value(...))"
            )
        return None

    def target(self, field: models.Field[Any, Any]) -> Any:
        suffix = REDACTED_DOMAIN if isinstance(field, models.EmailField) else ""
        if not field.unique:
            return REDACTED + suffix
        parts: list[Any] = [Value(f"{REDACTED}-"), Cast(F("pk"), models.TextField())]
        if suffix:
            parts.append(Value(suffix))
        return Concat(*parts, output_field=models.TextField())


def _pk_chars(model: Any) -> int:
    pk = model._meta.pk
    if isinstance(pk, models.UUIDField):
        return _PK_CHARS["uuid"]
    if isinstance(pk, models.CharField) and pk.max_length:
        return int(pk.max_length)
    return _PK_CHARS["int"]


@dataclass(frozen=True, slots=True, eq=False)
class _Value(Policy):
    constant: Any
    name = "value"  # type: ignore[misc]

    def __repr__(self) -> str:
        return "value(...)"  # never the value: it may echo what it replaces

    def problem(self, field: models.Field[Any, Any]) -> str | None:
        if self.constant is None:
            return None if field.null else "None needs a field declared null=True"
        if field.unique:
            return "a constant on a unique field would collide (use REDACT)"
        try:
            field.to_python(self.constant)
        except Exception as error:
            return f"the value does not fit the field ({type(error).__name__})"
        return None

    def target(self, field: models.Field[Any, Any]) -> Any:
        return self.constant

    def treated(self, field: models.Field[Any, Any]) -> Q:
        if self.constant is None:
            return NULL.treated(field)
        return super(_Value, self).treated(field)


@dataclass(frozen=True, slots=True, eq=False)
class _Expression(Policy):
    expression: Any
    name = "expression"  # type: ignore[misc]

    def __repr__(self) -> str:
        return "expression(...)"

    def target(self, field: models.Field[Any, Any]) -> Any:
        return self.expression


NULL: Policy = _Null()
EMPTY: Policy = _Empty()
REDACT: Policy = _Redact()


def value(constant: Any) -> Policy:
    """A policy writing ``constant`` (the audit records ``value``, never it)."""
    return _Value(constant)


def as_policy(given: Any) -> Policy:
    """``given`` as a :class:`Policy`: itself, an expression, or a constant."""
    if isinstance(given, Policy):
        return given
    if hasattr(given, "resolve_expression"):
        return _Expression(given)
    return _Value(given)


# -- treatments -------------------------------------------------------------------


class Treatment:
    """What an erase does to one table's rows; ``kind`` names it."""

    kind = "treatment"

    def describe(self) -> str:
        """How ``jobs_subject list`` and the export manifest show it."""
        return self.kind

    def covers(self, field: str) -> bool:
        """Whether an erase deals with ``field`` (the coverage check)."""
        return True


class Delete(Treatment):
    """Delete the subject's rows (Django's ``delete()``: cascades and signals)."""

    kind = "delete"

    def __repr__(self) -> str:
        return "DELETE"


DELETE = Delete()


@dataclass(frozen=True, slots=True, eq=False)
class Retain(Treatment):
    """Keep the rows as they are, for a stated reason (exported, never erased)."""

    reason: str
    kind = "retain"  # type: ignore[misc]

    def describe(self) -> str:
        """``retain: <reason>``."""
        return f"retain: {self.reason}"


@dataclass(frozen=True, slots=True, eq=False)
class Anonymize(Treatment):
    """Rewrite the named fields per their policy; the rows stay."""

    policies: Mapping[str, Policy]
    kind = "anonymize"  # type: ignore[misc]

    def describe(self) -> str:
        """``anonymize(email=redact, name=empty)``."""
        inner = ", ".join(f"{name}={p.name}" for name, p in self.policies.items())
        return f"anonymize({inner})"

    def covers(self, field: str) -> bool:
        """Only the fields it rewrites."""
        return field in self.policies


def anonymize(**fields: Any) -> Anonymize:
    """Rewrite each named field with its policy (``email=REDACT``...).

    Raises:
        SubjectDeclarationInvalid: no field named.
    """
    if not fields:
        raise SubjectDeclarationInvalid(
            "anonymize() names no field",
            fix="anonymize(email=REDACT, phone=NULL)",
        )
    return Anonymize({name: as_policy(given) for name, given in fields.items()})


def retain(reason: str) -> Retain:
    """Keep the table's rows on erase, for ``reason`` (recorded in the audit).

    Raises:
        SubjectDeclarationInvalid: the reason is blank or too long.
    """
    if (
        not isinstance(reason, str)
        or not reason.strip()
        or len(reason) > MAX_REASON_LENGTH
        or "\x00" in reason
    ):
        raise SubjectDeclarationInvalid(
            f"retain() needs a reason: non-blank text of at most "
            f"{MAX_REASON_LENGTH} characters",
            fix="retain('invoices are kept 10 years (tax law)')",
        )
    return Retain(reason)
