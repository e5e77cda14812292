#!/usr/bin/env python
"""Django's command-line utility for the example shop."""

import importlib.util
import os
import sys
from pathlib import Path


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    if importlib.util.find_spec("django_ultimate_jobs") is None:
        # Run from a checkout without `pip install -e .`: use the copy in the
        # repository root. Appended, so an installed copy always wins.
        sys.path.append(str(Path(__file__).resolve().parent.parent))
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
