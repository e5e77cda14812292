"""The worker settings without ``LOGGING``: a fresh project's logging.

For tests/test_console_by_default.py: Django's default logging only, so
``runjobs`` installs its own console handler for the app's logger.
"""

from tests.acceptance.worker_settings import *  # noqa: F403

globals().pop("LOGGING")
