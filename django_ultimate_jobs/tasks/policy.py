"""The retry policy and timeout of one task: backend ``OPTIONS``, then the task's own.

``TASKS[alias]["OPTIONS"]`` sets the defaults of every task on that backend;
``@task(attempts=..., backoff=..., timeout=...)`` (keywords Django passes on
to the backend's ``task_class``) overrides them per task. The merged policy
is stored in each job's input at enqueue, so a retry follows the policy the
job was enqueued with, never a later deploy's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..durations import parse_duration_ms
from ..errors import DurationInvalid, JobDeclarationInvalid
from ..retry import Retry

__all__ = ["POLICY_KEYS", "PolicyInvalid", "TaskPolicy", "task_overrides"]

RETRY_KEYS = ("attempts", "backoff", "delay", "max_delay", "jitter")
POLICY_KEYS = (*RETRY_KEYS, "timeout")
"""The ``OPTIONS`` keys, and the policy keywords ``@task(...)`` accepts."""


class PolicyInvalid(ValueError):
    """A policy value (``OPTIONS`` or a task keyword) is invalid."""


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """How a task retries (a :class:`Retry`) and its per-attempt timeout."""

    retry: Retry = field(default_factory=Retry)
    timeout_ms: int | None = None

    @classmethod
    def build(
        cls, values: Mapping[str, Any], *, base: TaskPolicy | None = None
    ) -> TaskPolicy:
        """Return ``base`` with the non-``None`` ``values`` applied.

        Raises:
            PolicyInvalid: an unknown key or an invalid value (every problem).
        """
        if not isinstance(values, Mapping):
            raise PolicyInvalid(f"OPTIONS must be a dict, not {type(values).__name__}")
        start = base if base is not None else cls()
        unknown = sorted(str(key) for key in values if key not in POLICY_KEYS)
        if unknown:
            raise PolicyInvalid(
                f"unknown option {', '.join(unknown)} (known: {', '.join(POLICY_KEYS)})"
            )
        given = {key: values[key] for key in RETRY_KEYS if values.get(key) is not None}
        retry = start.retry
        if given:
            merged = {
                "attempts": retry.attempts,
                "backoff": retry.backoff,
                "delay": retry.delay,
                "max_delay": retry.max_delay,
                "jitter": retry.jitter,
                **given,
            }
            try:
                retry = Retry(**merged)
            except JobDeclarationInvalid as error:
                raise PolicyInvalid(error.cause) from None
        timeout_ms = start.timeout_ms
        if values.get("timeout") is not None:
            try:
                timeout_ms = parse_duration_ms(values["timeout"], what="timeout")
            except DurationInvalid as error:
                raise PolicyInvalid(error.cause) from None
        return cls(retry=retry, timeout_ms=timeout_ms)

    def to_input(self) -> dict[str, Any]:
        """The JSON-safe form stored in the job's input."""
        return {
            "attempts": self.retry.attempts,
            "backoff": self.retry.backoff,
            "delay_ms": self.retry.delay_ms,
            "max_delay_ms": self.retry.max_delay_ms,
            "jitter": self.retry.jitter,
        }

    @classmethod
    def from_input(cls, retry: Any, timeout_ms: Any) -> TaskPolicy:
        """Rebuild a stored policy.

        Raises:
            PolicyInvalid: the stored form is malformed.
        """
        if not isinstance(retry, Mapping):
            raise PolicyInvalid("the stored retry policy is not an object")
        if timeout_ms is not None and (
            isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int)
        ):
            raise PolicyInvalid("the stored timeout is not a whole number")
        try:
            policy = Retry(
                attempts=retry["attempts"],
                backoff=retry["backoff"],
                delay=retry["delay_ms"],
                max_delay=retry["max_delay_ms"],
                jitter=retry["jitter"],
            )
        except (KeyError, TypeError, JobDeclarationInvalid) as error:
            raise PolicyInvalid(
                f"the stored retry policy is malformed ({type(error).__name__})"
            ) from None
        return cls(retry=policy, timeout_ms=timeout_ms)


def task_overrides(task: Any) -> dict[str, Any]:
    """The policy keywords a task sets (``UltimateTask`` fields that are not None)."""
    return {
        key: value
        for key in POLICY_KEYS
        if (value := getattr(task, key, None)) is not None
    }
