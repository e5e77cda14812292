"""A ``manage.py`` for the acceptance tier's supervisor tests.

``runjobs --processes N`` starts each child by re-running its own
``sys.argv``; a project starts it through its ``manage.py``, which this
file stands in for (settings come from ``DJANGO_SETTINGS_MODULE``).
"""

import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    execute_from_command_line(sys.argv)
