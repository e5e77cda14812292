"""``manage.py jobs_import``: list, check and run the declared imports.

``NAME --prefix P`` alone is a dry run that checks the manifest against the
model and every part (present, size, SHA-256, rows) and loads nothing;
``--write`` queues the pass and follows its ``Import`` row.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import ngettext

from ...exports.imports import get_import, registered_imports
from ...terminal import counted
from ..pass_command import PassCommand, Queued, describe

__all__ = ["Command"]


class Command(PassCommand):
    """List, check or run imports."""

    help = (
        "Show the declared imports and what they loaded (--list), check an "
        "artifact (NAME --prefix P) or load it (NAME --prefix P --write)."
    )
    kind = "import"
    takes_prefix = True
    rerun_help = "load a done import again (an upsert: nothing twice)"

    def list_lines(self) -> list[str]:
        """Each import and each artifact it loaded."""
        from ...models import Import

        lines = []
        for handle in registered_imports():
            lines.append(f"{handle.name}: into {handle.model._meta.label}")
            for row in Import.objects.filter(name=handle.name):
                lines.append(f"  {row.prefix}: {describe(row, unit='part')}")
        return lines or ["no import_rows(...) is declared"]

    def dry_run(self, options: dict[str, Any]) -> str:
        """The manifest checked against the model and every part."""
        plan = get_import(options["name"]).plan(options["prefix"])
        return (
            f"{plan.name} from {plan.prefix} ({plan.state}): the manifest and its "
            f"{plan.parts:,} {plan.format} {ngettext('part', 'parts', plan.parts)} "
            f"check out: would load {counted(plan.rows, 'row', grouped=True)} "
            f"from the storage {plan.storage!r}"
        )

    def enqueue(self, options: dict[str, Any]) -> Queued:
        """Queue the pass (``--force``: a done one again)."""
        from ...models import Import

        name, prefix = options["name"], options["prefix"]
        enqueued = get_import(name).enqueue(prefix=prefix, force=options["rerun"])
        return Queued(
            f"{name} from {prefix}",
            enqueued,
            lambda: Import.objects.filter(name=name, prefix=prefix).first(),
            "part",
        )
