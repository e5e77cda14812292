"""The input of a bridge job: which task, its arguments and its policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .policy import PolicyInvalid, TaskPolicy

__all__ = ["PayloadInvalid", "TaskPayload"]


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
