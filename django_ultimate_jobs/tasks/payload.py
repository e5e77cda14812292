"""The input of a bridge job: which task, its arguments and its policy."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .compat import normalize_json
from .policy import PolicyInvalid, TaskPolicy

__all__ = ["PayloadInvalid", "TaskPayload", "json_form"]


def json_form(value: Any) -> Any:
    """``value`` as Django's task backends store it: normalised, keys as JSON writes them.

    ``django.utils.json.normalize_json`` first (tuples become lists, bytes
    strings), then every dict key becomes the string JSON writes for it
    (``{1: "a"}`` -> ``{"1": "a"}``), as a JSON round trip does in Django's
    database backends: the task receives what any later read of the result
    shows. The ``@job`` API does not do this: there a non-string key is
    refused.

    Raises:
        TypeError: a value or key JSON has no form for (Django's own
            refusal for a ``datetime``).
        ValueError: undecodable bytes (Django's), a non-finite float key,
            or two keys of one dict that JSON writes the same (``1`` and
            ``"1"``): one would silently replace the other.
        RecursionError: nested past Python's recursion limit.
    """
    return _string_keys(normalize_json(value))


def _string_keys(value: Any) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            text = key if isinstance(key, str) else _key_text(key)
            if text in out:
                raise ValueError(
                    f"two keys of one dict are both {text!r} in JSON "
                    "(a string key and a number key, say)"
                )
            out[text] = _string_keys(item)
        return out
    if isinstance(value, list):
        return [_string_keys(item) for item in value]
    return value


def _key_text(key: Any) -> str:
    # json.dumps writes bool and None keys as JSON words, numbers as their
    # repr; it refuses other keys (TypeError) and non-finite floats.
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        if not math.isfinite(key):
            raise ValueError(f"a dict key is a non-finite number ({key!r})")
        return float.__repr__(key)
    raise TypeError(f"Unsupported dict key type: {type(key)}")


class PayloadInvalid(ValueError):
    """A stored bridge input is malformed (written by hand, or by a newer release)."""


@dataclass(frozen=True, slots=True)
class TaskPayload:
    """Everything a worker needs to run one task, as stored in the job's input."""

    module_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    takes_context: bool
    policy: TaskPolicy
    run_after: datetime | None = None

    def to_input(self) -> dict[str, Any]:
        """The job input (JSON-safe when ``args`` and ``kwargs`` are)."""
        return {
            "module_path": self.module_path,
            "args": self.args,
            "kwargs": self.kwargs,
            "backend": self.backend,
            "takes_context": self.takes_context,
            "retry": self.policy.to_input(),
            "timeout_ms": self.policy.timeout_ms,
            "run_after": None if self.run_after is None else self.run_after.isoformat(),
        }

    @classmethod
    def parse(cls, given: Mapping[str, Any]) -> TaskPayload:
        """Read a stored input back.

        Raises:
            PayloadInvalid: a key is missing or has the wrong type.
        """
        module_path = given.get("module_path")
        backend = given.get("backend")
        args = given.get("args")
        kwargs = given.get("kwargs")
        takes_context = given.get("takes_context", False)
        if not isinstance(module_path, str) or not module_path:
            raise PayloadInvalid("module_path must be a non-empty string")
        if not isinstance(backend, str) or not backend:
            raise PayloadInvalid("backend must be a non-empty string")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PayloadInvalid("args must be a list and kwargs an object")
        if not isinstance(takes_context, bool):
            raise PayloadInvalid("takes_context must be a boolean")
        try:
            policy = TaskPolicy.from_input(given.get("retry"), given.get("timeout_ms"))
        except PolicyInvalid as error:
            raise PayloadInvalid(str(error)) from None
        run_after = given.get("run_after")
        parsed: datetime | None = None
        if run_after is not None:
            try:
                parsed = datetime.fromisoformat(run_after)
            except (TypeError, ValueError):
                raise PayloadInvalid("run_after must be an ISO 8601 datetime") from None
        return cls(
            module_path=module_path,
            args=args,
            kwargs=kwargs,
            backend=backend,
            takes_context=takes_context,
            policy=policy,
            run_after=parsed,
        )
