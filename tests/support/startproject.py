"""A fresh ``django-admin startproject``, set up by following the docs' blocks.

The README's install and quick start (and the embedded-database how-to in
docs/reference/commands.md) are followed as a reader would, block by block,
in real subprocesses: :func:`doc_blocks` reads the fenced blocks under a
heading, and :meth:`FreshProject.follow` does what each one says:

- ``# settings.py`` (python): its statements are added at the end of the
  project's settings.py; a list written with a ``# ...`` line (the
  entries already there) is extended, not replaced;
- ``# <path>.py`` (python, after an optional ``# example: run``): the block
  is written to that file of the project;
- ``sh``: each line runs in the project folder, ``python`` being this
  interpreter; ``export NAME="$(command)"`` runs the command and sets NAME
  for the later lines; ``pip install`` is skipped (the package is installed
  in this venv already).

Anything else is refused, so a doc step the helper cannot follow fails the
test instead of being skipped. Nothing is taken from the suite's settings:
the subprocesses see ``os.environ`` without ``DJANGO_SETTINGS_MODULE`` and
``DATABASE_URL``, plus what the test and the followed steps set.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .workers import REPO_ROOT

__all__ = ["PROJECT", "Block", "FreshProject", "doc_blocks", "project_env"]

PROJECT = "myproject"
"""The project name the docs use (``--database myproject`` too)."""
STEP_TIMEOUT_S = 300
_FENCE = re.compile(r"^```([a-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_FILE_COMMENT = re.compile(r"^# ([\w./-]+\.py)\b")
_EXPORT = re.compile(r'^export ([A-Z_][A-Z0-9_]*)="\$\((.*)\)"$')
_RUN_MARK = "# example: run"


@dataclass(frozen=True)
class Block:
    """One fenced block of a doc page."""

    path: str
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.lang or 'no language'})"


def doc_blocks(relative: str, heading: str) -> list[Block]:
    """The fenced blocks under the heading ``heading`` of a doc page, in order.

    The section ends at the next heading of the same or a higher level.
    """
    text = (REPO_ROOT / relative).read_text(encoding="utf-8")
    found = re.search(rf"^(#+) {re.escape(heading)}[ \t]*$", text, re.MULTILINE)
    if found is None:
        raise AssertionError(f"{relative} has no heading {heading!r}")
    level = len(found.group(1))
    start = found.end()
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(_unfenced(text), start)
    section = text[start : end.start() if end else len(text)]
    offset = text.count("\n", 0, start)
    return [
        Block(
            relative,
            offset + section.count("\n", 0, match.start()) + 1,
            match.group(1),
            match.group(2),
        )
        for match in _FENCE.finditer(section)
    ]


def _unfenced(text: str) -> str:
    # Headings inside code blocks (a "# settings.py" comment) are not
    # headings: blank the blocks out, keeping every offset.
    return _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def project_env(**extra: str) -> dict[str, str]:
    """The environment of a reader's shell: the suite's own settings removed."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH")
    }
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


class FreshProject:
    """``django-admin startproject myproject`` in ``root``, then doc steps."""

    def __init__(self, root: Path, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.transcript: list[str] = []
        admin = Path(sys.executable).with_name("django-admin")
        self._run([str(admin), "startproject", PROJECT], cwd=root)
        self.dir = root / PROJECT
        self.settings = self.dir / PROJECT / "settings.py"
        assert self.settings.exists(), self.log()

    def follow(self, block: Block) -> list[subprocess.CompletedProcess[str]]:
        """Do what ``block`` says; answer the commands it ran."""
        self.transcript.append(f"--- {block}")
        lines = block.text.splitlines()
        if block.lang == "sh":
            return [done for line in lines if (done := self.shell(line)) is not None]
        first = next((line for line in lines if line.strip() != _RUN_MARK), "")
        if block.lang == "python" and first.strip() == "# settings.py":
            self.add_settings(block.text)
            return []
        named = _FILE_COMMENT.match(first)
        if block.lang == "python" and named:
            target = self.dir / named.group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
            self.transcript.append(f"wrote {named.group(1)}")
            return []
        raise AssertionError(f"{block}: not a step this helper knows how to follow")

    def add_settings(self, text: str) -> None:
        """Add a ``# settings.py`` block's statements to the settings."""
        tree = ast.parse(text)
        statements = []
        for node in tree.body:
            source = ast.get_source_segment(text, node) or ""
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.List)
                and "# ..." in source
            ):
                # "[# ..., 'app']": the entries already there, then these.
                items = ", ".join(
                    ast.get_source_segment(text, item) or "" for item in node.value.elts
                )
                statements.append(f"{node.targets[0].id} += [{items}]")
            else:
                statements.append(source)
        with self.settings.open("a", encoding="utf-8") as settings:
            settings.write("\n\n" + "\n".join(statements) + "\n")
        self.transcript.append("settings.py += " + " | ".join(statements))

    def shell(self, line: str) -> subprocess.CompletedProcess[str] | None:
        """Run one line of an ``sh`` block (``None``: nothing to run)."""
        line = line.strip()
        if not line or line.startswith("#"):
            return None
        exported = _EXPORT.match(line)
        command = exported.group(2) if exported else line
        argv = shlex.split(command, comments=True)
        if argv[:2] == ["pip", "install"]:
            self.transcript.append(f"skipped (installed already): {line}")
            return None
        if argv[0] == "python":
            argv[0] = sys.executable
        done = self._run(argv, cwd=self.dir)
        if exported:
            self.env[exported.group(1)] = done.stdout.strip()
        return done

    def manage(
        self, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``python manage.py *args`` in the project."""
        return self._run(
            [sys.executable, "manage.py", *args], cwd=self.dir, check=check
        )

    def log(self) -> str:
        """Every step and its output, for a failure message."""
        return "\n".join(self.transcript)

    def _run(
        self, argv: list[str], *, cwd: Path, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        self.transcript.append(
            f"$ {shlex.join(argv)}  (exit {done.returncode})\n{done.stdout}{done.stderr}"
        )
        if check:
            assert done.returncode == 0, self.log()
        return done
