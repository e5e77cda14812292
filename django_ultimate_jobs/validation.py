"""Input checks run at enqueue (and at claim), before anything is written.

Three checks, cheapest first: the keywords match the handler's signature,
the input survives a JSON round trip unchanged (so a ``datetime`` or a
tuple is refused here rather than turning into something else in the
worker), and the optional ``input_schema`` accepts it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import JobDeclarationInvalid, JobInputInvalid

__all__ = [
    "InputShape",
    "check_schema",
    "dump_input",
    "holds_escaped_nul",
    "input_shape",
]

# A \u0000 escape that is not itself an escaped backslash followed by "u0000".
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


@dataclass(frozen=True, slots=True)
class InputShape:
    """The keywords a handler accepts, read once from its signature."""

    required: frozenset[str]
    optional: frozenset[str]
    open: bool
    """The handler takes ``**kwargs``: any keyword is accepted."""

    def check(self, job: str, given: Mapping[str, Any]) -> None:
        """Refuse unknown or missing keywords (names only, never values)."""
        keys = given.keys()
        missing = self.required - keys
        unknown = () if self.open else keys - self.required - self.optional
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {', '.join(sorted(missing))}")
            if unknown:
                problems.append(f"unknown {', '.join(sorted(unknown))}")
            raise JobInputInvalid(
                f"{job} input does not match its signature: {'; '.join(problems)}",
                meta={
                    "job": job,
                    "missing": sorted(missing),
                    "unknown": sorted(unknown),
                },
            )


def input_shape(func: Callable[..., Any], job: str) -> InputShape:
    """Read the handler's signature: ``ctx`` first, then keyword parameters.

    Raises:
        JobDeclarationInvalid: no ``ctx`` parameter, or positional-only input.
    """
    params = list(inspect.signature(func).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise JobDeclarationInvalid(
            f"the handler of {job} must take the job context as its first parameter",
            fix="def handler(ctx, *, invoice_id: int): ...",
        )
    required: set[str] = set()
    optional: set[str] = set()
    is_open = False
    for param in params[1:]:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            is_open = True
        elif param.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            raise JobDeclarationInvalid(
                f"the handler of {job} takes positional input ({param.name}); "
                "input is passed by keyword",
                fix="make every parameter after ctx keyword-only: def handler(ctx, *, ...)",
            )
        elif param.default is inspect.Parameter.empty:
            required.add(param.name)
        else:
            optional.add(param.name)
    return InputShape(frozenset(required), frozenset(optional), is_open)


def dump_input(job: str, given: Mapping[str, Any]) -> str:
    """Return the input as JSON text, refusing what would not round-trip.

    Raises:
        JobInputInvalid: not JSON-serialisable, non-finite numbers, or a
            value JSON would change (tuples, non-string keys...).
    """
    try:
        text = json.dumps(
            given, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise JobInputInvalid(
            f"{job} input is not JSON-safe ({_kind_of(error)})",
            fix="pass ids, strings, numbers, booleans, lists and dicts "
            "(a datetime as .isoformat())",
            meta={"job": job},
        ) from None
    if holds_escaped_nul(text):
        # PostgreSQL's jsonb cannot store NUL: refuse it here, not at insert.
        raise JobInputInvalid(
            f"{job} input contains a NUL character, which JSON columns cannot store",
            fix="strip NUL characters from strings before enqueueing",
            meta={"job": job},
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JobInputInvalid(
            f"{job} input contains a lone surrogate, which is not valid UTF-8",
            fix="encode strings as valid UTF-8 before enqueueing",
            meta={"job": job},
        ) from None
    if json.loads(text) != given:
        raise JobInputInvalid(
            f"{job} input changes in a JSON round trip (a tuple, a non-string key, ...)",
            fix="pass lists instead of tuples and string keys in dicts",
            meta={"job": job},
        )
    return text


def holds_escaped_nul(text: str) -> bool:
    """Whether JSON ``text`` holds a NUL, which PostgreSQL's jsonb refuses."""
    return _ESCAPED_NUL.search(text) is not None


def _kind_of(error: Exception) -> str:
    message = str(error)
    if "not JSON serializable" in message:
        # "Object of type datetime is not JSON serializable": the type only.
        return message.split(" is not")[0].replace("Object of type", "a value of type")
    if "Out of range float" in message:
        return "a non-finite number"
    return type(error).__name__


def check_schema(job: str, schema: Any, given: Mapping[str, Any]) -> None:
    """Validate ``given`` with ``schema`` (pydantic model, dataclass or callable).

    Raises:
        JobInputInvalid: the schema refused the input.
    """
    issues = schema_issues(schema, dict(given))
    if issues is not None:
        raise JobInputInvalid(
            f"{job} input refused by its input_schema ({issues})", meta={"job": job}
        )


def schema_issues(schema: Any, value: Any) -> str | None:
    """``None`` when ``schema`` accepts ``value``; else a summary of why not.

    The summary names fields and error kinds, never the refused values.
    """
    if schema is None:
        return None
    try:
        if hasattr(schema, "model_validate"):
            schema.model_validate(value)
        elif dataclasses.is_dataclass(schema) and isinstance(schema, type):
            if not isinstance(value, dict):
                raise TypeError("a dataclass schema needs an object")
            schema(**value)
        else:
            schema(value)
    except Exception as error:
        return _schema_summary(error)
    return None


def _schema_summary(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            issues = errors(include_input=False)
        except TypeError:
            issues = errors()
        # Field paths and error kinds only: never the refused values.
        return "; ".join(
            f"{'.'.join(str(p) for p in issue.get('loc', ())) or 'input'}: "
            f"{issue.get('type', 'invalid')}"
            for issue in issues[:5]
        )
    return type(error).__name__


def check_schema_declared(job: str, schema: Any) -> None:
    """Refuse an ``input_schema`` that cannot validate anything."""
    if schema is None or hasattr(schema, "model_validate") or callable(schema):
        return
    raise JobDeclarationInvalid(
        f"input_schema of {job} must be a pydantic model, a dataclass or a callable",
        meta={"job": job},
    )
