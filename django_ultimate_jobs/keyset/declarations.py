"""Name -> declaration tables of the pass kinds, bound to the job registry.

Each kind (backfill, reindex, export, import) keeps its declarations by name; a
declaration is alive while the job it declared is registered, so forgetting
the job (``registry.unregister``, as tests and the docs' examples do)
forgets the declaration too. Declaring the same thing again (a module
imported twice) replaces it; another declaration under a taken name is
refused before anything is registered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from django.db import models

from ..errors import JobDuplicate, JobsError
from ..jobs import job
from ..registry import get_job, unregister
from ..retry import Retry
from ..validation import name_problem
from .walk import rate_problem

if TYPE_CHECKING:
    from ..jobs import JobHandle

__all__ = ["DEFAULT_RETRY", "Declarations", "Problems", "pass_job", "refused"]

DEFAULT_RETRY = Retry(attempts=10)
"""More attempts than a plain job: a long pass outlives a deploy or two."""


class _Declared(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def job(self) -> JobHandle[Any]: ...


S = TypeVar("S", bound=_Declared)


class Declarations(Generic[S]):
    """The live declarations of one kind, by name."""

    def __init__(
        self, kind: str, unknown: Callable[..., JobsError], fix: str | None = None
    ) -> None:
        self.kind = kind
        self._unknown = unknown
        self._fix = fix
        self._table: dict[str, S] = {}
        self._lock = threading.Lock()

    def _live(self, name: str) -> S | None:
        spec = self._table.get(name)
        if spec is not None and get_job(spec.job.name) is not spec.job:
            del self._table[name]  # its job was unregistered
            return None
        return spec

    def check_free(self, name: str, origin: str) -> None:
        """Refuse ``name`` when another declaration (another origin) holds it.

        Raises:
            JobDuplicate: it is taken.
        """
        with self._lock:
            existing = self._live(name)
        if existing is not None and existing.origin != origin:
            raise JobDuplicate(
                f"two {self.kind}s are declared with the name {name!r} "
                f"({existing.origin} and {origin})",
                fix="give one of them another name=...",
                meta={"name": name},
            )

    def add(self, spec: S) -> None:
        """Store ``spec`` (after :meth:`check_free` and its job's declaration)."""
        with self._lock:
            self._table[spec.name] = spec

    def get(self, name: str) -> S:
        """The declaration under ``name``.

        Raises:
            the kind's ``unknown`` error: none is.
        """
        with self._lock:
            spec = self._live(name) if isinstance(name, str) else None
        if spec is None:
            raise self._unknown(
                f"no {self.kind} is declared under the name {name!r:.200}",
                fix=self._fix,
                meta={self.kind: name},
            )
        return spec

    def holds(self, name: str) -> bool:
        """Whether ``name`` is declared."""
        with self._lock:
            return self._live(name) is not None

    def all(self) -> list[S]:
        """Every live declaration, by name."""
        with self._lock:
            names = sorted(self._table)
            return [spec for name in names if (spec := self._live(name)) is not None]

    def forget(self, name: str) -> None:
        """Forget ``name`` and its job (tests declare them on the fly)."""
        with self._lock:
            spec = self._table.pop(name, None)
        if spec is not None:
            unregister(spec.job.name)


class Problems(list[str]):
    """What is wrong with one declaration, gathered so that all are named at once."""

    def name(self, name: Any, max_length: int) -> None:
        """A name a job could be declared with, with room for the kind's prefix."""
        wrong = name_problem(name)
        if wrong is None and len(name) > max_length:
            wrong = f"must be at most {max_length} characters, not {len(name)}"
        if wrong is not None:
            self.append(f"name {wrong}")

    def whole(self, option: str, value: Any) -> None:
        """A whole number of at least 1 (``batch``, a byte limit)."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.append(f"{option} must be a whole number >= 1, got {value!r}")

    def rate(self, rate: Any, *, optional: bool = False) -> None:
        """Pages a second (``None`` too when ``optional``: unpaced)."""
        wrong = rate_problem(rate, optional=optional)
        if wrong is not None:
            self.append(wrong)

    def model(self, ref: Any) -> None:
        """A model class or ``"app_label.Model"`` (a label is looked up later,
        once the app registry is ready)."""
        if not isinstance(ref, str) and not (
            isinstance(ref, type) and issubclass(ref, models.Model)
        ):
            self.append(
                f"model must be a model class or 'app_label.Model', got {ref!r:.80}"
            )

    def raise_if_any(
        self, refusal: Callable[..., JobsError], kind: str, name: Any
    ) -> None:
        """Raise ``refusal`` naming every problem, if there is one."""
        if self:
            raise refused(refusal, kind, name, list(self))


def refused(
    refusal: Callable[..., JobsError], kind: str, name: Any, problems: list[str]
) -> JobsError:
    """The kind's declaration refusal: ``<kind> '<name>' is invalid: <problems>``."""
    # A name refused for its length is shown shortened.
    shown = name[:60] + "..." if isinstance(name, str) and len(name) > 60 else name
    return refusal(
        f"{kind} {shown!r} is invalid: " + "; ".join(problems),
        meta={kind: str(shown), "problems": problems},
    )


def pass_job(
    body: Callable[..., Any],
    *,
    kind: str,
    name: str,
    prefix: str,
    key: Callable[[Any], str],
    queue: Any,
    retry: Retry | None,
    timeout: Any,
) -> JobHandle[Any]:
    """Declare the job of a pass: ``<prefix><name>``, running ``body``.

    ``key`` answers the job's idempotency key from its input: one live pass
    per key. ``retry`` defaults to :data:`DEFAULT_RETRY`.
    """
    body.__qualname__ = body.__name__ = f"{kind}_{name}"
    body.__doc__ = f"The pass of {kind} {name!r}."
    return job(
        name=prefix + name,
        queue=queue,
        retry=retry if retry is not None else DEFAULT_RETRY,
        timeout=timeout,
        idempotency_key=key,
    )(body)
