"""The driver is the whole storage seam: nothing outside ``drivers/`` probes it.

A caller tests a declared flag (``driver.features``) or calls a declared
verb or role (``drivers/base.py``). This walks the package's syntax trees
and fails on any of, outside ``django_ultimate_jobs/drivers/``:

- ``getattr``/``hasattr``/``isinstance``/``issubclass`` on a driver object
  or class (``isinstance(x, BaseDriver)``, "is this a driver at all", is
  the one question allowed);
- an attribute starting with ``_`` read from a driver (or one of its roles);
- a comparison with a driver's name (``settings.driver == "postgres"``);
- an import of a concrete driver class (``PostgresDriver``,
  ``MemoryDriver``), except in ``testing/`` (the conformance suite's docs).

No exemption: the worker's last probes went with issue 21's worker half.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_ultimate_jobs"
DRIVER_NAMES = frozenset({"postgres", "memory", "redis"})
DRIVER_CLASSES = frozenset({"PostgresDriver", "MemoryDriver"})
ALLOWED_ISINSTANCE = frozenset({"BaseDriver"})
_DRIVERISH = re.compile(r"^_?(\w+_)?driver$")


def _is_driverish(node: ast.AST) -> bool:
    """Whether an expression reaches a driver: ``driver``, ``self._driver``,
    ``pg_driver``, ``get_driver()``, ``settings.driver``, or an attribute
    or call made on one of those (``driver.leases``)."""
    while True:
        if isinstance(node, ast.Name):
            return bool(_DRIVERISH.match(node.id))
        if isinstance(node, ast.Attribute):
            if _DRIVERISH.match(node.attr):
                return True
            node = node.value
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "get_driver":
                return True
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return False


def _names_driver_class(node: ast.AST) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return any(
        name.endswith("Driver") and name not in ALLOWED_ISINSTANCE for name in names
    )


def _driver_name_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in DRIVER_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_driver_name_constant(e) for e in node.elts)
    return False


def seam_probes(source: str, relative: str) -> list[tuple[int, str]]:
    """Every probe of a driver in ``source`` (a module at ``relative``)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[tuple[int, str]] = []

    def report(node: ast.AST, what: str) -> None:
        code = lines[node.lineno - 1].strip()  # type: ignore[attr-defined]
        found.append((node.lineno, f"{what}: {code}"))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            probe = node.func.id
            if probe in ("getattr", "hasattr") and node.args:
                if _is_driverish(node.args[0]):
                    report(node, f"{probe} on a driver")
            elif probe in ("isinstance", "issubclass") and len(node.args) == 2:
                if _is_driverish(node.args[0]) or _names_driver_class(node.args[1]):
                    allowed = {
                        n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)
                    }
                    if not allowed or not allowed <= ALLOWED_ISINSTANCE:
                        report(node, f"{probe} of a driver")
        elif isinstance(node, ast.Attribute):
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if private and _is_driverish(node.value):
                report(node, "a driver's private attribute")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_driver_name_constant(s) for s in sides) and any(
                _is_driverish(s) for s in sides
            ):
                report(node, "a comparison with a driver name")
        elif isinstance(node, ast.ImportFrom) and not relative.startswith("testing/"):
            classes = {alias.name for alias in node.names} & DRIVER_CLASSES
            if classes:
                report(node, f"an import of {', '.join(sorted(classes))}")
    return found


def _package_modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if "drivers" not in path.relative_to(PACKAGE).parts[:1]
        and "migrations" not in path.parts
    )


def test_nothing_outside_drivers_probes_a_driver():
    """No getattr/hasattr/isinstance, private read, name comparison or class import."""
    found = []
    for path in _package_modules():
        relative = path.relative_to(PACKAGE).as_posix()
        for line, what in seam_probes(path.read_text(encoding="utf-8"), relative):
            found.append(f"{relative}:{line}: {what}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("snippet", "what"),
    [
        ('clock = getattr(driver, "clock", None)', "getattr on a driver"),
        ('if hasattr(self.driver, "events"): pass', "hasattr on a driver"),
        ('roll = getattr(get_driver().maintenance, "x", None)', "getattr on a driver"),
        ("if isinstance(driver, PostgresDriver): pass", "isinstance of a driver"),
        ("ok = isinstance(thing, MemoryDriver)", "isinstance of a driver"),
        ("with driver._lock: pass", "a driver's private attribute"),
        ("rows = self._driver.steps._rows", "a driver's private attribute"),
        ('if settings.driver == "postgres": pass', "a comparison with a driver name"),
        (
            'wake = jobs_settings().driver in ("postgres", "memory")',
            "a comparison with a driver name",
        ),
        (
            "from django_ultimate_jobs.drivers.postgres import PostgresDriver",
            "an import of PostgresDriver",
        ),
    ],
)
def test_the_walk_finds_each_kind_of_probe(snippet, what):
    """Each kind of probe, in a snippet, is found (the walk can fail)."""
    found = seam_probes(snippet, "operator.py")
    assert [w.split(":")[0] for _, w in found] == [what]


@pytest.mark.parametrize(
    "snippet",
    [
        "clock = driver.clock.now()",
        "if driver.features.wake_listener: pass",
        "ok = isinstance(driver, BaseDriver)",
        'value = getattr(ctx, "_driver", None)',
        'if settings.outbox == "required": pass',
        "self._driver = driver",
    ],
)
def test_declared_reads_are_not_probes(snippet):
    """Reading a declared flag, role or verb is what callers should do."""
    assert seam_probes(snippet, "operator.py") == []
