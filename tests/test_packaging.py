"""What the package says about itself: its release, and the Djangos it supports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import django_ultimate_jobs
from tests.support.workers import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _allowed_django_series() -> list[str]:
    """Every Django series the ``django>=X.Y,<A.B`` pin admits (X.0, X.1, X.2 each)."""
    pin = next(
        dep
        for dep in PYPROJECT["project"]["dependencies"]
        if re.match(r"(?i)django\s*[<>=]", dep)
    )
    low = re.search(r">=\s*(\d+)\.(\d+)", pin)
    high = re.search(r"<\s*(\d+)\.(\d+)", pin)
    assert low and high, f"the Django pin {pin!r} has no lower and upper bound"
    series, major, minor = [], int(low[1]), int(low[2])
    while (major, minor) < (int(high[1]), int(high[2])):
        series.append(f"{major}.{minor}")
        major, minor = (major + 1, 0) if minor == 2 else (major, minor + 1)
    return series


def test_a_classifier_names_every_django_series_the_pin_allows():
    """PyPI's "Framework :: Django :: X.Y" list matches ``django>=...,<...``."""
    classified = {
        c.rsplit(" :: ", 1)[1]
        for c in PYPROJECT["project"]["classifiers"]
        if c.startswith("Framework :: Django :: ")
    }
    allowed = _allowed_django_series()
    assert "6.1" in allowed
    assert classified == set(allowed)


def test_version_is_the_installed_release():
    """``__version__`` is the installed distribution's, not a copy that drifts."""
    assert django_ultimate_jobs.__version__ == metadata.version("django-ultimate-jobs")
    assert django_ultimate_jobs.__version__ == PYPROJECT["project"]["version"]


def test_runjobs_version_names_the_release():
    """``manage.py runjobs --version`` says which django-ultimate-jobs runs."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--version"],
        cwd=REPO_ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"django-ultimate-jobs {metadata.version('django-ultimate-jobs')} (Django "
    ), done.stdout


def test_a_source_tree_never_installed_says_so(monkeypatch):
    """Without distribution metadata the version is ``0+unknown``, not an error."""

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    django_ultimate_jobs._version.cache_clear()
    try:
        assert django_ultimate_jobs.__version__ == "0+unknown"
    finally:
        django_ultimate_jobs._version.cache_clear()
