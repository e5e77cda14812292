"""What the package says about itself: its release, and the Djangos it supports."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib import metadata

import django_ultimate_jobs
from tests.support.workers import REPO_ROOT, django_command

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
    done = django_command("runjobs", "--version")
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


def _imported_top_level_names() -> set[str]:
    names: set[str] = set()
    for path in (REPO_ROOT / "django_ultimate_jobs").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


# Used without an import: input_schema takes pydantic (>= 2) models by their
# model_validate(), so the extra pins the major version the code calls.
DUCK_TYPED = {"pydantic"}


def test_every_extra_installs_something_the_package_imports():
    """An extra exists only when the code uses it (no redis or otel for nothing)."""
    modules_of: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(_normalise(dist), set()).add(module)
    imported = _imported_top_level_names()
    unused = {}
    for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items():
        if extra == "dev":  # the test and lint tools of this repository
            continue
        for requirement in requirements:
            dist = _normalise(re.match(r"[A-Za-z0-9_.-]+", requirement)[0])
            modules = modules_of.get(dist, {dist.replace("-", "_")})
            if not modules & imported and dist not in DUCK_TYPED:
                unused.setdefault(extra, []).append(requirement)
    assert not unused, f"extras that install what nothing imports: {unused}"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
