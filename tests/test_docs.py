"""The docs tell the truth about the code.

- every registered error code is in docs/reference/errors.md with its retry
  class, and nothing else is, and each is raised somewhere;
- every ULTIMATE_JOBS key is in docs/reference/settings.md, and nothing else;
- the state diagram has exactly the transitions the trigger enforces;
- every event name the package logs is in docs/reference/logging.md;
- every runjobs option is in docs/reference/commands.md;
- every fenced block in README.md and docs/**/*.md whose first line is
  ``# example: run`` runs, against PostgreSQL with a frozen clock.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.core.management.base import BaseCommand

import django_ultimate_jobs
from django_ultimate_jobs import conf, errors
from django_ultimate_jobs.backfills import registered_backfills, unregister_backfill
from django_ultimate_jobs.drivers import set_driver
from django_ultimate_jobs.errors import JobsError, SettingsInvalid
from django_ultimate_jobs.registry import registered_jobs, unregister
from tests.support.child_python import last_json_line, run_python

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DOC_FILES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
PACKAGE = ROOT / "django_ultimate_jobs"

RUN_MARK = "# example: run"
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def _read(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


def _table_cells(text: str, first_cell: str) -> dict[str, list[str]]:
    """Rows of markdown tables whose first cell is a code span matching ``first_cell``."""
    rows: dict[str, list[str]] = {}
    pattern = re.compile(rf"^\|\s*`({first_cell})`\s*\|(.*)$", re.MULTILINE)
    for match in pattern.finditer(text):
        rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


# -- (a) error codes ------------------------------------------------------------

# A fresh interpreter, so codes that other tests register (register_error_retry
# is process-wide) cannot leak into the list the docs must match. Every module
# of the package is imported first: a JobsError subclass registers its code
# when its class is defined, wherever that is.
_CODES_SCRIPT = """
import importlib, json, pkgutil
import django
django.setup()
import django_ultimate_jobs
for module in pkgutil.walk_packages(
    django_ultimate_jobs.__path__, "django_ultimate_jobs."
):
    importlib.import_module(module.name)
from django_ultimate_jobs.errors import registered_codes
print(json.dumps({code: klass.value for code, klass in registered_codes().items()}))
"""


@pytest.fixture(scope="module")
def package_codes() -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    codes = last_json_line(run_python(["-c", _CODES_SCRIPT], env=env, cwd=ROOT))
    assert codes, "registered_codes() answered nothing"
    return codes


def test_every_error_code_is_documented_with_its_retry_class(package_codes):
    """errors.md lists exactly the registered codes, each with its retry class."""
    rows = _table_cells(_read("docs/reference/errors.md"), r"X_[A-Z0-9_]+")
    documented = {code: cells[0] for code, cells in rows.items()}
    missing = sorted(set(package_codes) - set(documented))
    stale = sorted(set(documented) - set(package_codes))
    wrong = {
        code: (documented[code], klass)
        for code, klass in package_codes.items()
        if code in documented and documented[code] != klass
    }
    assert not missing, f"codes missing from docs/reference/errors.md: {missing}"
    assert not stale, f"docs/reference/errors.md lists unregistered codes: {stale}"
    assert not wrong, f"documented retry class != registered (doc, code): {wrong}"


def _code_classes() -> dict[str, type[JobsError]]:
    """Code -> the package class that declares it (every module imported)."""
    for module in pkgutil.walk_packages([str(PACKAGE)], "django_ultimate_jobs."):
        importlib.import_module(module.name)
    found: dict[str, type[JobsError]] = {}
    pending: list[type[JobsError]] = [JobsError]
    while pending:
        klass = pending.pop()
        pending.extend(klass.__subclasses__())
        if klass.__module__.startswith("django_ultimate_jobs.") and "code" in vars(
            klass
        ):
            found[klass.code] = klass
    return found


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            body = node.body
            if body and isinstance(body[0], ast.Expr):
                ids.add(id(body[0].value))
    return ids


def _uses() -> tuple[set[str], set[str]]:
    """(names called, code strings written as errors) across the package source."""
    called: set[str] = set()
    written: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    called.add(func.value.id)  # Name.wrap(...)
                elif isinstance(func, ast.Name):
                    called.add(func.id)
                for keyword in node.keywords:
                    if keyword.arg == "code" and isinstance(
                        keyword.value, ast.Constant
                    ):
                        written.add(str(keyword.value.value))
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value.startswith("X_")
                and ":" in node.value
            ):
                written.add(node.value.split(":", 1)[0])
    return called, written


def test_every_registered_code_is_raised_somewhere(package_codes):
    """No code sits in the catalogue without a path that raises or stores it.

    Raised means, in the package's source (docstrings and comments do not
    count): a call of the class that carries the code (``Name(...)``,
    ``Name.wrap(...)``), a string written as an error (``"X_CODE: ..."``), or
    ``code="X_CODE"``. Classes ``django_ultimate_jobs`` exports and
    ``errors.APP_CODES`` are raised by apps.
    """
    classes = _code_classes()
    called, written = _uses()
    # The scan sees both kinds of use (a class called, a stored error text).
    assert "JobNotFound" in called and "X_JOB_LEASE_LOST" in written
    for_apps = {
        klass.code
        for name in django_ultimate_jobs.__all__
        if isinstance(klass := getattr(django_ultimate_jobs, name), type)
        and issubclass(klass, JobsError)
    } | set(errors.APP_CODES)
    unused = sorted(
        code
        for code in package_codes
        if code not in for_apps
        and code not in written
        and not (code in classes and classes[code].__name__ in called)
    )
    assert not unused, f"codes defined but never raised: {unused}"


def test_every_retry_class_is_explained():
    """The retry-class table names every RetryClass value."""
    text = _read("docs/reference/errors.md")
    for klass in errors.RetryClass:
        assert f"| `{klass.value}` |" in text, klass


# -- (b) settings -------------------------------------------------------------


def _accepted_keys() -> set[str]:
    """Every key parse_settings accepts: conf's own table of settings."""
    return set(conf.SETTINGS)


def _settings_rows() -> dict[str, list[str]]:
    """Key -> [default, meaning, validated by], from the table in settings.md."""
    text = _read("docs/reference/settings.md").split("\n## ", 1)[0]
    return _table_cells(text, r"[A-Z][A-Z0-9_]*")


def _refused_as_unknown(key: str) -> bool:
    try:
        conf.parse_settings({key: object()})
    except SettingsInvalid as error:
        return key in error.meta.get("unknown", ())
    except Exception:  # a bad value, refused some other way: the key is known
        return False
    return False


def test_key_tables_are_what_parse_settings_accepts():
    """The key table the docs are checked against is the accepted keys."""
    keys = _accepted_keys()
    assert keys, "conf defines no keys"
    assert not [key for key in keys if _refused_as_unknown(key)]
    assert _refused_as_unknown("NOT_A_SETTING")


def test_every_setting_is_documented():
    """settings.md lists every ULTIMATE_JOBS key, and no key that does not exist."""
    documented = set(_settings_rows())
    missing = sorted(_accepted_keys() - documented)
    stale = sorted(documented - _accepted_keys())
    assert not missing, f"keys missing from docs/reference/settings.md: {missing}"
    assert not stale, f"docs/reference/settings.md lists unknown keys: {stale}"


def test_documented_defaults_are_the_defaults():
    """Each Default cell, parsed as conf parses the key, gives JobsSettings' default."""
    defaults = conf.JobsSettings()
    wrong = {}
    for key, (default, *_) in _settings_rows().items():
        written = ast.literal_eval(default.strip("`"))
        for attr, value in conf.parse_setting(key, written).items():
            if getattr(defaults, attr) != value:
                wrong[key] = (default, getattr(defaults, attr))
    assert not wrong, f"settings.md default != conf default (doc, code): {wrong}"


def test_documented_types_are_what_conf_checks():
    """Each "Validated by" cell opens with what conf says the key must be."""
    wrong = {}
    for key, (_default, _meaning, validated_by, *_) in _settings_rows().items():
        expects = conf.SETTINGS[key][0].expects
        if not validated_by.replace("`", "").lower().startswith(expects.lower()):
            wrong[key] = (validated_by, expects)
    assert not wrong, f"settings.md 'Validated by' does not open with: {wrong}"


# -- states, logging, commands --------------------------------------------------


def test_state_diagram_matches_the_trigger():
    """The mermaid diagram has exactly the transitions of models._TRANSITIONS."""
    from django_ultimate_jobs.models import _TRANSITIONS

    text = _read("docs/explanation/states.md")
    (diagram,) = re.findall(r"^```mermaid\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    drawn = set(re.findall(r"^\s*(\w+)\s*-->\s*(\w+)", diagram, re.MULTILINE))
    assert drawn == set(_TRANSITIONS), (
        f"missing: {sorted(set(_TRANSITIONS) - drawn)}; "
        f"extra: {sorted(drawn - set(_TRANSITIONS))}"
    )


_LOG_CALL = re.compile(
    r"logger\.(?:debug|info|warning|error|exception|critical)\(\s*\"(jobs\.[a-z0-9.-]+)\""
)


def test_every_logged_event_is_documented():
    """logging.md lists every event name the package logs, and only those."""
    logged = {
        name
        for path in (ROOT / "django_ultimate_jobs").rglob("*.py")
        for name in _LOG_CALL.findall(path.read_text(encoding="utf-8"))
    }
    assert logged, "no logger calls found: has the call style changed?"
    documented = set(
        _table_cells(_read("docs/reference/logging.md"), r"jobs\.[a-z0-9.-]+")
    )
    undocumented = sorted(logged - documented)
    never_logged = sorted(documented - logged)
    assert not undocumented, f"missing from docs/reference/logging.md: {undocumented}"
    assert not never_logged, f"logging.md lists events never logged: {never_logged}"


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    }


def test_every_runjobs_option_is_documented():
    """commands.md names every option runjobs adds to Django's own."""
    from django_ultimate_jobs.management.commands.runjobs import Command

    own = _long_options(Command().create_parser("manage.py", "runjobs"))
    own -= _long_options(BaseCommand().create_parser("manage.py", "base"))
    assert own
    text = _read("docs/reference/commands.md")
    missing = sorted(option for option in own if f"`{option}" not in text)
    assert not missing, f"runjobs options missing from commands.md: {missing}"


# -- (c) runnable examples -------------------------------------------------------


@dataclass(frozen=True)
class Example:
    path: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def _examples() -> list[Example]:
    found = []
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            body = match.group(1)
            if body.split("\n", 1)[0].strip() == RUN_MARK:
                line = text.count("\n", 0, match.start(1)) + 1
                found.append(Example(str(path.relative_to(ROOT)), line, body))
    return found


EXAMPLES = _examples()


def test_run_marks_open_their_blocks():
    """``# example: run`` only counts as a block's first line: no stray marks."""
    marks = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in DOC_FILES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip() == RUN_MARK
    ]
    assert sorted(marks) == sorted(str(example) for example in EXAMPLES)


@pytest.mark.parametrize(
    "path", ["README.md", "docs/tutorial.md", "docs/howto/testing.md"]
)
def test_key_pages_have_runnable_examples(path):
    """The quick start, the tutorial and the testing guide are proven to run."""
    assert any(example.path == path for example in EXAMPLES)


@pytest.mark.postgres
@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_runnable_example(example, pg_driver):
    """The block runs as printed, on PostgreSQL with a frozen clock installed."""
    _run_example(example, pg_driver)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "example",
    [e for e in EXAMPLES if e.path == "docs/howto/ledger.md"],
    ids=str,
)
def test_a_ledger_example_runs_on_a_database_that_holds_postings(example, pg_driver):
    """Run twice in a row, each ledger example still holds: on a database
    with postings in it (a reader's own), its fixed keys and tenant made the
    first example's posting a replay (``created`` False) and its balances
    the sum of every run."""
    _run_example(example, pg_driver)
    _run_example(example, pg_driver)


def _run_example(example: Example, pg_driver) -> None:
    before = {handle.name for handle in registered_jobs()}
    backfills_before = {spec.name for spec in registered_backfills()}
    declared_before = _subjects_and_consumers()
    retry_classes = dict(errors._REGISTRY)
    # Pad so that a traceback's line numbers are the markdown file's.
    source = "\n" * (example.line - 1) + example.code
    namespace = {"__name__": "docs_example"}
    try:
        # dont_inherit: this module's `from __future__ import annotations` must
        # not turn the example's annotations into strings (pydantic models).
        code = compile(source, str(ROOT / example.path), "exec", dont_inherit=True)
        exec(code, namespace)
    finally:
        for spec in registered_backfills():
            if spec.name not in backfills_before:
                unregister_backfill(spec.name)
        for handle in registered_jobs():
            if handle.name not in before:
                unregister(handle.name)
        _forget_subjects_and_consumers(declared_before)
        errors._REGISTRY.clear()
        errors._REGISTRY.update(retry_classes)
        set_driver(pg_driver)


def _subjects_and_consumers() -> tuple[set[str], set[str], dict[str, dict[str, str]]]:
    """The subjects, consumers and registered personal-data marks declared now."""
    from django_ultimate_jobs.consumers import registered_consumers
    from django_ultimate_jobs.subjects import registered_subjects
    from django_ultimate_jobs.subjects.marks import registered_marks

    return (
        {spec.name for spec in registered_subjects()},
        {spec.name for spec in registered_consumers()},
        registered_marks(),
    )


def _forget_subjects_and_consumers(
    before: tuple[set[str], set[str], dict[str, dict[str, str]]],
) -> None:
    """Forget what an example declared (its marks would fail later checks)."""
    from django_ultimate_jobs.consumers import unregister_consumer
    from django_ultimate_jobs.subjects import unmark_personal_data, unregister_subject

    subjects, consumers, marks = _subjects_and_consumers()
    for name in subjects - before[0]:
        unregister_subject(name)
    for name in consumers - before[1]:
        unregister_consumer(name)
    for label, fields in marks.items():
        added = set(fields) - set(before[2].get(label, {}))
        if added:
            unmark_personal_data(label, *added)


# -- links ----------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_relative_links_resolve():
    """Every relative link in the docs names a file (and heading) that exists."""
    broken = []
    for path in DOC_FILES:
        text = _FENCE.sub("", path.read_text(encoding="utf-8"))
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s) and mailto links are not checked
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


_JSON_CLAIM = re.compile(
    r"`--json` output for the commands that have it: ((?:`\w+`(?:, )?)+)"
)


def _has_json(parser: argparse.ArgumentParser) -> bool:
    """Whether the parser, or any of its subcommands, takes ``--json``."""
    for action in parser._actions:
        if "--json" in action.option_strings:
            return True
        if isinstance(action, argparse._SubParsersAction):
            if any(_has_json(sub) for sub in action.choices.values()):
                return True
    return False


def test_the_docs_name_exactly_the_commands_with_json() -> None:
    """The redaction docs say which ``jobs...`` commands have ``--json``:
    exactly those whose parser takes it."""
    commands = Path(django_ultimate_jobs.__file__).parent / "management" / "commands"
    with_json = set()
    for module in sorted(commands.glob("jobs*.py")):
        command = load_command_class("django_ultimate_jobs", module.stem)
        if _has_json(command.create_parser("manage.py", module.stem)):
            with_json.add(module.stem)
    assert "jobs" in with_json  # the walk finds the flag where it is
    for page in ("howto/admin.md", "reference/settings.md"):
        text = " ".join((DOCS / page).read_text().split())
        claims = _JSON_CLAIM.findall(text)
        assert claims, page
        for claim in claims:
            assert set(re.findall(r"`(\w+)`", claim)) == with_json, page
