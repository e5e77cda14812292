"""Input checks run at enqueue (and at claim), before anything is written.

Three checks, cheapest first: the keywords match the handler's signature,
the input survives a JSON round trip unchanged (so a ``datetime`` or a
tuple is refused here rather than turning into something else in the
worker), and the optional ``input_schema`` accepts it.

The text and JSON checks here are the one place that knows what
PostgreSQL can store: ``text`` holds no NUL and only valid UTF-8 (a lone
surrogate cannot be encoded), ``jsonb`` holds no ``\\u0000`` escape, and an
index row holds about 2,700 bytes. Every string a caller hands over
(names, keys, tenants, step and event names) goes through
:func:`text_problem`; every JSON value through :func:`json_text`.
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
from .jsonpath import first_refusal

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_KEY_BYTES",
    "MAX_NAME_LENGTH",
    "NAME_RULE",
    "InputShape",
    "JsonRefused",
    "check_schema",
    "dump_input",
    "holds_escaped_nul",
    "input_shape",
    "json_text",
    "name_problem",
    "storable",
    "storable_text",
    "text_problem",
]

# A \u0000 escape that is not itself an escaped backslash followed by "u0000".
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# json.dumps() with keyword arguments builds an encoder on every call (a
# third of an enqueue's validation); one kept encoder does the same work.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# Values whose JSON text reads back as an equal value of the same type.
_EXACT_SCALARS = frozenset({str, int, float, bool, type(None)})

MAX_KEY_BYTES = 512
"""The longest idempotency key, tenant, actor, step name or event key, in
UTF-8 bytes. The live-key unique index spans name (200 characters, at most
800 bytes), tenant and key: 800 + 512 + 512 bytes stay well inside the
2,704 bytes a btree index row can hold, whatever the script."""
MAX_NAME_LENGTH = 200
"""The longest job, queue or cron task name, in characters."""
NAME_RULE = (
    f"a non-empty string of at most {MAX_NAME_LENGTH} printable characters, "
    "without surrounding spaces"
)
"""What a job, queue or cron task name must be (for fixes and docs)."""
MAX_JSON_DEPTH = 100
"""How deeply lists and dicts may nest in an input, payload or step output
(the outermost container is level 1), like Ruby's JSON ``max_nesting``. Deep
enough for any real document; shallow enough that encoding, decoding and
comparing never meet Python's recursion limit in the caller or the worker."""


_BY_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD


@dataclass(frozen=True, slots=True)
class InputShape:
    """The keywords a handler accepts, read once from its signature."""

    required: frozenset[str]
    optional: frozenset[str]
    open: bool
    """The handler takes ``**kwargs``: any keyword is accepted."""
    context: str | None = None
    """The context parameter's name when a keyword could also bind it."""

    def check(self, job: str, given: Mapping[str, Any]) -> None:
        """Refuse unknown or missing keywords (names only, never values)."""
        keys = given.keys()
        missing = self.required - keys
        unknown = () if self.open else keys - self.required - self.optional
        # handler(ctx, **input) with an input key named like ctx is a
        # TypeError on every attempt: refuse it here, once.
        clash = self.context if self.context in keys else None
        if missing or unknown or clash:
            problems = []
            if missing:
                problems.append(f"missing {', '.join(sorted(missing))}")
            if unknown:
                problems.append(f"unknown {', '.join(sorted(unknown))}")
            if clash:
                problems.append(f"{clash} is the handler's context parameter")
            raise JobInputInvalid(
                f"{job} input does not match its signature: {'; '.join(problems)}",
                fix=None if not clash else f"rename the input key {clash}",
                meta={
                    "job": job,
                    "missing": sorted(missing),
                    "unknown": sorted(unknown),
                    "reserved": [clash] if clash else [],
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
    # A positional-only context cannot be bound by a keyword.
    context = params[0].name if params[0].kind is _BY_KEYWORD else None
    return InputShape(frozenset(required), frozenset(optional), is_open, context)


def dump_input(job: str, given: Mapping[str, Any]) -> str:
    """Return the input as JSON text, refusing what would not round-trip.

    Raises:
        JobInputInvalid: not JSON-serialisable, non-finite numbers, NUL or
            lone surrogates, nested deeper than :data:`MAX_JSON_DEPTH`, or a
            value JSON would change (tuples, non-string keys...).
    """
    try:
        return json_text(given)
    except JsonRefused as refused:
        meta: dict[str, Any] = {"job": job}
        if refused.path:
            meta["path"] = refused.path
        raise JobInputInvalid(
            f"{job} input {refused.reason}", fix=refused.fix, meta=meta
        ) from None


class JsonRefused(ValueError):
    """A value :func:`json_text` refuses; ``reason`` never holds the value.

    ``path`` names where the refused item sits (``order.placed_at``,
    ``items[2].at``; ``""`` for the value itself), when it was found.
    """

    def __init__(self, reason: str, fix: str, *, path: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix
        self.path = path


def json_text(value: Any, *, exact: bool = True) -> str:
    """Return ``value`` as JSON text PostgreSQL's jsonb can store.

    Args:
        exact: also refuse a value a JSON round trip would change (a tuple,
            a non-string key); a step output is stored in its JSON form
            instead.

    Raises:
        JsonRefused: not JSON-serialisable, non-finite numbers, NUL, lone
            surrogates, nested deeper than :data:`MAX_JSON_DEPTH`, or (with
            ``exact``) not JSON's own form.
    """
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise _too_deep() from None
    except (TypeError, ValueError) as error:
        raise _refused(
            value,
            "is not JSON-safe",
            f"({_kind_of(error)})",
            "pass ids, strings, numbers, booleans, lists and dicts "
            "(a datetime as .isoformat())",
        ) from None
    # Fewer brackets than the limit cannot nest past it: most values skip
    # the walk (brackets inside strings only make the guard cautious).
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _too_nested(value):
        raise _too_deep()
    # Cheap tests first: a substring scan before the regex, an ASCII text
    # (most inputs) holds no lone surrogate, and a flat dict of plain
    # scalars always survives the round trip, so it skips the re-parse.
    if "\\u0000" in text and holds_escaped_nul(text):
        raise _refused(
            value,
            "contains a NUL character, which JSON columns cannot store",
            "",
            "strip NUL characters from strings",
            exact=False,
        )
    if not text.isascii() and not storable(text):
        raise _refused(
            value,
            "contains a lone surrogate, which is not valid UTF-8",
            "",
            "encode strings as valid UTF-8",
            exact=False,
        )
    if exact and not _plainly_exact(value) and json.loads(text) != value:
        raise _refused(
            value,
            "changes in a JSON round trip",
            "(a tuple, a non-string key, ...)",
            "pass lists instead of tuples and string keys in dicts",
        )
    return text


def _refused(
    value: Any, what: str, unlocated: str, fix: str, *, exact: bool = True
) -> JsonRefused:
    """The refusal, naming where the first refused item sits when it is found.

    ``what: order.placed_at is a value of type datetime``; a NUL or a
    surrogate (``exact=False``) says only where: ``what (in order.note)``.
    The value itself refused (no path) keeps ``what (unlocated)``.
    """
    found = first_refusal(value, exact=exact)
    if found is None or not found.path:
        reason = f"{what} {unlocated}".rstrip()
    elif not exact:
        reason = f"{what} (in {found.path})"
    else:
        reason = f"{what}: {found.path} {found.problem}"
    return JsonRefused(reason, fix, path=None if found is None else found.path)


def _plainly_exact(value: Any) -> bool:
    """Whether ``value`` is a dict (exactly) of string keys and plain scalars.

    Exact types only: a subclass (an ``IntEnum``, a ``str`` subclass with
    its own ``__eq__``) may not come back equal, so it takes the re-parse.
    """
    return (
        type(value) is dict
        and all(type(key) is str for key in value)
        and _EXACT_SCALARS.issuperset(map(type, value.values()))
    )


def _too_deep() -> JsonRefused:
    return JsonRefused(
        f"nests lists and dicts more than {MAX_JSON_DEPTH} levels deep",
        f"flatten the structure to at most {MAX_JSON_DEPTH} levels",
    )


def _too_nested(value: Any) -> bool:
    """Whether containers nest past :data:`MAX_JSON_DEPTH` (walked without recursion)."""
    pending: list[tuple[Any, int]] = []
    if isinstance(value, dict | list | tuple):
        pending.append((value, 1))
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item
        pending.extend(
            (child, depth + 1)
            for child in children
            if isinstance(child, dict | list | tuple)
        )
    return False


def holds_escaped_nul(text: str) -> bool:
    """Whether JSON ``text`` holds a NUL, which PostgreSQL's jsonb refuses."""
    return _ESCAPED_NUL.search(text) is not None


def storable(text: str) -> bool:
    """Whether PostgreSQL text can hold ``text`` (no NUL, valid UTF-8)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate replaced by U+FFFD.

    For text this app writes on a caller's behalf and may shorten anyway
    (error messages, stacks, progress notes): refusing it would lose the
    whole write over one character.
    """
    if storable(text):
        return text
    return "".join(
        "\ufffd" if char == "\x00" or "\ud800" <= char <= "\udfff" else char
        for char in text
    )


def text_problem(
    value: Any, *, max_chars: int | None = None, max_bytes: int | None = None
) -> str | None:
    """Why PostgreSQL cannot store ``value`` as a name or key, else ``None``.

    The answer completes a sentence naming the value ("... is longer than
    512 bytes in UTF-8") and never quotes it.
    """
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if "\x00" in value:
        return "holds a NUL character, which PostgreSQL text cannot store"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "holds a lone surrogate, which is not valid UTF-8"
    if max_chars is not None and len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    if max_bytes is not None and size > max_bytes:
        return f"is longer than {max_bytes} bytes in UTF-8"
    return None


def name_problem(value: Any) -> str | None:
    """Why ``value`` is not a job, queue or task name (see :data:`NAME_RULE`).

    One rule for every name a user gives: ``@job(name=, queue=)``,
    ``using(queue=)``, ``task(name=)``, ``QUEUES``, ``HOUSEKEEPING_QUEUE``,
    ``runjobs --queues`` and ``jobs pause/resume``. The answer completes a
    sentence naming the value ("queue must be ..."), else ``None``.
    """
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if value != value.strip():
        return "must be written without surrounding spaces"
    if not storable(value.replace("\x00", "")):
        return "holds a lone surrogate, which is not valid UTF-8"
    if "\x00" in value:
        return "holds a NUL character, which PostgreSQL text cannot store"
    odd = next((char for char in value if not char.isprintable()), None)
    if odd is not None:
        # The code point, not the name: it says what to strip.
        return f"holds the non-printable character U+{ord(odd):04X}"
    if len(value) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters, not {len(value)}"
    return None


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
    if schema is None:
        return  # no copy of the input to check against nothing
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
