"""``ArtifactHandle``: what an export and an import share about an artifact.

An artifact is the parts and manifest at one prefix of one storage; each
(declaration, prefix) has its progress row (``Export`` or ``Import``), its
one live pass (the job's key is the prefix), and pause and resume.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.files.storage import Storage
from django.db import models

from ..keyset.declarations import refused
from ..keyset.errors import PASS_REFUSALS
from ..keyset.ledger import Ledger
from .storage import StorageRef, resolve_storage

if TYPE_CHECKING:
    from ..drivers.base import Enqueued
    from ..errors import JobsError
    from ..jobs import JobHandle
    from ..keyset.models import PassRecord

__all__ = ["ArtifactHandle"]


class ArtifactHandle:
    """The shared half of :class:`~.export.ExportHandle` and :class:`~.imports.ImportHandle`."""

    kind: ClassVar[str] = ""
    """``export`` or ``import``: the progress row's, the messages' and the codes' word."""
    preposition: ClassVar[str] = ""
    """``at`` (an export writes at a prefix) or ``from`` (an import reads from one)."""

    def __init__(
        self, *, name: str, model: Any, storage: StorageRef, origin: str
    ) -> None:
        self.name = name
        self.model_ref = model
        self.storage = storage
        self.origin = origin
        self.job: JobHandle[Any] = None  # type: ignore[assignment]

    @property
    def model(self) -> type[models.Model]:
        """The declared model, resolved on first use with what the kind checks
        beside it (an export's fields, an import's key).

        Raises:
            the kind's declaration refusal: the model, or a field it names, is
                unknown.
        """
        return self._resolve()[0]

    def _resolve(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def record_model(self) -> type[PassRecord]:
        """``Export`` or ``Import``."""
        raise NotImplementedError

    def declaration_refusal(self, cause: str, **more: Any) -> JobsError:
        """The kind's ``X_..._DECLARATION_INVALID``."""
        raise NotImplementedError

    def run_input(self, row: Any) -> dict[str, Any]:
        """The job input that goes on with the pass of ``row`` (a resume)."""
        return {"prefix": row.prefix, "force": False}

    def what(self, prefix: str) -> str:
        """``export 'orders' at 'exports/2026-05'``: how messages name a pass."""
        return f"{self.kind} {self.name!r} {self.preposition} {prefix!r}"

    def open_storage(self) -> Storage:
        """The storage of the artifacts.

        Raises:
            the kind's declaration refusal: ``storage=`` names no storage.
        """
        found = resolve_storage(self.storage)
        if isinstance(found, str):
            raise refused(self.declaration_refusal, self.kind, self.name, [found])
        return found

    def ledger(self, prefix: str, **defaults: Any) -> Ledger:
        """The progress row of the artifact at ``prefix``."""
        return Ledger(
            kind=self.kind,
            model=self.record_model(),
            lookup={"name": self.name, "prefix": prefix},
            label=self.what(prefix),
            meta={self.kind: self.name, "prefix": prefix},
            refusals=PASS_REFUSALS,
            rerun_fix=(
                f"python manage.py jobs_{self.kind} {self.name} --prefix {prefix} "
                "--write --force"
            ),
            defaults=defaults or None,
        )

    def pause(self, prefix: str) -> None:
        """Pause the pass at ``prefix`` before its next part.

        Raises:
            PassStateInvalid: it is done or paused already.
        """
        self.ledger(prefix).pause()

    def resume(self, prefix: str) -> Enqueued:
        """Queue a run that goes on after the last part done.

        Raises:
            PassStateInvalid: it is not paused.
        """
        enqueue: Callable[[Any], Enqueued] = lambda row: self.job.enqueue(  # noqa: E731
            **self.run_input(row)
        )
        return self.ledger(prefix).resume(enqueue)
