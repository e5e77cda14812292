"""Run Python in a fresh interpreter and read the JSON line it prints last.

What a test checks there is what a new process sees: the modules it imported,
the codes it registered, the refusal it met at start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["last_json_line", "run_python"]


def run_python(
    args: list[str], *, env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``python args...`` (this interpreter), its output captured; 60 s at most."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def last_json_line(done: subprocess.CompletedProcess[str]) -> Any:
    """The last line the child printed, as JSON; it must have exited 0."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
