"""Settings for the benches: the test settings plus the bench jobs app.

DATABASE_URL (read by tests.settings) must point at the bench database;
bench/throughput.py and bench/idle.py set it for the workers they start.
"""

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchjobs"]  # noqa: F405
