"""``manage.py jobs_export``: list, dry-run and run the declared exports.

``NAME --prefix P`` alone is a dry run (rows and parts, the storage, and
every refusal the pass would meet: a bad prefix, params the source does not
take, an unknown storage); ``--write`` queues the pass and follows its
``Export`` row. ``--param KEY=VALUE`` (repeatable) passes ``source(KEY=
"VALUE")``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...exports.export import get_export, registered_exports
from ...terminal import counted
from ..pass_command import PassCommand, Queued, describe

__all__ = ["Command"]


class Command(PassCommand):
    """List, dry-run or run exports."""

    help = (
        "Show the declared exports and their artifacts (--list), dry-run one "
        "(NAME --prefix P) or run it (NAME --prefix P --write)."
    )
    kind = "export"
    takes_prefix = True

    def add_arguments(self, parser: CommandParser) -> None:
        """The shared options, ``--prefix`` and ``--param KEY=VALUE``."""
        super().add_arguments(parser)
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a keyword argument of the export's source= (a string); repeatable",
        )

    def list_lines(self) -> list[str]:
        """Each export and each artifact it wrote."""
        from ...models import Export

        lines = []
        for handle in registered_exports():
            lines.append(
                f"{handle.name}: {handle.format} parts of {handle.batch:,} rows"
            )
            for row in Export.objects.filter(name=handle.name):
                lines.append(
                    f"  {row.prefix}: {describe(row, unit='part')}, {row.bytes:,} bytes"
                )
        return lines or ["no export_rows(...) is declared"]

    def dry_run(self, options: dict[str, Any]) -> str:
        """Rows and parts a pass would write."""
        plan = get_export(options["name"]).plan(options["prefix"], _params(options))
        return (
            f"{plan.name} at {plan.prefix} ({plan.state}): would write "
            f"{counted(plan.rows, 'row', grouped=True)} in "
            f"{counted(plan.parts, 'part', grouped=True)} to the storage "
            f"{plan.storage!r}"
        )

    def enqueue(self, options: dict[str, Any]) -> Queued:
        """Queue the pass (``--force``: a done one again, from its first row)."""
        from ...models import Export

        name, prefix = options["name"], options["prefix"]
        enqueued = get_export(name).enqueue(
            prefix=prefix, params=_params(options), force=options["rerun"]
        )
        return Queued(
            f"{name} at {prefix}",
            enqueued,
            lambda: Export.objects.filter(name=name, prefix=prefix).first(),
            "part",
        )


def _params(options: dict[str, Any]) -> dict[str, str]:
    params = {}
    for given in options["param"]:
        key, sep, value = given.partition("=")
        if not sep or not key.isidentifier():
            raise CommandError(
                f"--param takes KEY=VALUE (KEY an identifier), got {given!r}"
            )
        params[key] = value
    return params
