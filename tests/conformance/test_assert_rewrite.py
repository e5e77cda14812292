"""Every module of the conformance suite is rewritten, as the docs say.

A failed check of the suite must show what it compared: every
``django_ultimate_jobs.testing`` module is loaded by pytest's assertion
rewriter, and docs/howto/testing.md gives driver authors the same line
tests/conftest.py uses.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import django_ultimate_jobs.testing as suite

REGISTER = 'pytest.register_assert_rewrite("django_ultimate_jobs.testing")'


def test_every_conformance_module_is_rewritten():
    names = [
        info.name
        for info in pkgutil.iter_modules(suite.__path__)
        if info.name.startswith("conformance")
    ]
    assert len(names) >= 10
    for name in names:
        module = importlib.import_module(f"{suite.__name__}.{name}")
        assert type(module.__loader__).__name__ == "AssertionRewritingHook", name


def test_the_docs_give_the_line_the_suite_uses():
    root = Path(__file__).resolve().parents[2]
    assert REGISTER in (root / "tests/conftest.py").read_text(encoding="utf-8")
    page = (root / "docs/howto/testing.md").read_text(encoding="utf-8")
    assert REGISTER in page
