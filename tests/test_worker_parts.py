"""The worker stays a composition of parts (issue 21), read from the source.

- ``worker/runner.py`` (the ``Worker`` root) builds the parts; no part
  imports it, and the modules of ``worker/`` import each other without a
  circle;
- a part never reads another object's private attribute (a name with a
  leading underscore defined in another module): it calls a public method of
  the part or of the shared :class:`~django_ultimate_jobs.worker.held.HeldAttempts`;
- no test reads a private attribute of a worker or of one of its parts: a
  test drives them through their public methods.

Each check is also fed a snippet that breaks it, so it is known to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import django_ultimate_jobs.worker as worker_package

WORKER_DIR = Path(worker_package.__file__).parent
TESTS_DIR = Path(__file__).parent
PARTS = {
    "Worker",
    "ClaimLoop",
    "SlotPool",
    "SettleLoop",
    "Keeper",
    "HeldAttempts",
    "Lifecycle",
    "ClaimWake",
    "Scheduler",
    "SchedulerThread",
}
"""Classes whose instances a test must not read privates of."""


def _modules() -> dict[str, ast.Module]:
    return {
        path.stem: ast.parse(path.read_text(), filename=str(path))
        for path in sorted(WORKER_DIR.glob("*.py"))
    }


def _sibling_imports(tree: ast.Module) -> set[str]:
    """The ``worker/`` modules a module imports (``from .x import ...``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and (node.module.startswith("django_ultimate_jobs.worker."))
        ):
            found.add(node.module.split(".")[2])
    return found


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for other in sorted(graph.get(name, ())):
            if state.get(other) == 1:
                return [*path[path.index(other) :], other]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def _privates_by_class(tree: ast.Module) -> dict[str, set[str]]:
    """Per class of a module: its private names (``self._x`` attributes, ``_x`` methods)."""
    found: dict[str, set[str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names = found.setdefault(cls.name, set())
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "self" and _is_private(node.attr):
                    names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if _is_private(node.name):
                    names.add(node.name)
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_private_reads(tree: ast.Module) -> list[str]:
    """Reads of a private attribute of an object other than ``self``.

    Allowed only between two classes of one module (a ``Lease`` and its
    ``Limiter``): the name must be a private of another class of the module
    than the one reading it.
    """
    privates = _privates_by_class(tree)
    found = []

    def check(scope: ast.AST, owner: str | None) -> None:
        friends = set().union(
            *(names for name, names in privates.items() if name != owner)
        )
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and _is_private(node.attr)
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
                and node.attr not in friends
            ):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")

    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            check(node, node.name)
        else:
            check(node, None)
    return sorted(set(found), key=lambda text: int(text.split(":")[0][5:]))


def private_reads_of_parts(tree: ast.Module) -> list[str]:
    """Private attributes read along a chain rooted at a worker or a part.

    A root is a name bound to ``Worker(...)``, to a part's constructor or to
    a helper whose name ends in ``worker``, or a name that is ``worker``.
    """
    roots = {"worker"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            called = (
                func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            )
            if called in PARTS or called.endswith("worker"):
                roots.update(t.id for t in node.targets if isinstance(t, ast.Name))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in roots:
            if any(_is_private(name) for name in chain):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def test_no_part_imports_the_root_and_the_parts_import_no_circle():
    modules = _modules()
    graph = {
        name: _sibling_imports(tree) & set(modules) for name, tree in modules.items()
    }
    importers = sorted(name for name, deps in graph.items() if "runner" in deps)
    assert importers == [], f"worker modules importing the Worker root: {importers}"
    assert _circle(graph) is None, f"an import circle in worker/: {_circle(graph)}"


def test_the_circle_check_finds_a_circle():
    assert _circle({"held": {"slots"}, "slots": {"keeper"}, "keeper": {"held"}}) == [
        "held",
        "slots",
        "keeper",
        "held",
    ]


def test_no_part_reads_another_objects_private_attribute():
    found = {
        name: reads
        for name, tree in _modules().items()
        if (reads := foreign_private_reads(tree))
    }
    assert found == {}, f"worker modules reading another object's privates: {found}"


def test_the_private_read_check_fails_on_a_part_reaching_into_another():
    snippet = ast.parse(
        "class Keeper:\n"
        "    def tick(self):\n"
        "        with self._held._lock:\n"
        "            return len(self._held._held)\n"
    )
    assert foreign_private_reads(snippet) == [
        "line 3: self._held._lock",
        "line 4: self._held._held",
    ]


def test_no_test_reads_a_private_attribute_of_a_worker_or_its_parts():
    found = {}
    for path in sorted(TESTS_DIR.rglob("*.py")):
        if path == Path(__file__):
            continue
        reads = private_reads_of_parts(ast.parse(path.read_text(), filename=str(path)))
        if reads:
            found[str(path.relative_to(TESTS_DIR))] = reads
    assert found == {}, f"tests reading worker privates: {found}"


def test_the_test_check_fails_on_a_test_reading_a_worker_private():
    snippet = ast.parse(
        "worker = limited_worker(driver, per_tenant=1)\n"
        "(attempt,), _ = worker._claim(1)\n"
        "keeper = Keeper(config)\n"
        "keeper.renew_leases()\n"
        "assert worker.held._limiter is None\n"
    )
    assert private_reads_of_parts(snippet) == [
        "line 2: worker._claim",
        "line 5: worker.held._limiter",
    ]
