"""``./dev test`` gets the admin's browser before it runs anything.

The browser tests need Debian's chromium and chromedriver. On a machine
without them, ``./dev test`` installs them as root with apt, and otherwise
stops before building or running anything, printing the one command to run.

Each case runs the real ``./dev`` with ``ULTIMATE_JOBS_BROWSER_DIR`` at an
empty folder (no browser) and a ``PATH`` whose ``id`` says who we are and
whose ``apt-get`` records its calls instead of installing anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.workers import REPO_ROOT

DEV = REPO_ROOT / "dev"
SUDO_COMMAND = "sudo apt-get update && sudo apt-get install -y chromium chromium-driver"


class Machine:
    """A fake ``id`` and ``apt-get`` in front of (or instead of) the real PATH."""

    def __init__(self, root: Path, *, uid: int, apt: bool, full_path: bool = True):
        self.bin = root / "bin"
        self.browser = root / "browser"
        self.apt_log = root / "apt.log"
        self.bin.mkdir()
        self.browser.mkdir()
        self._script("id", f"echo {uid}")
        if apt:
            # `install` "installs" the two binaries where the tests look.
            self._script(
                "apt-get",
                f'echo "$*" >> {self.apt_log}\n'
                'case "$*" in *install*) '
                f"printf '#!/bin/sh\\n' > {self.browser}/chromium; "
                f"cp {self.browser}/chromium {self.browser}/chromedriver; "
                f"chmod +x {self.browser}/chromium {self.browser}/chromedriver;; esac",
            )
        # ./dev needs dirname before it reaches the check.
        (self.bin / "dirname").symlink_to(shutil.which("dirname"))
        self.path = str(self.bin)
        if full_path:
            self.path += os.pathsep + os.environ["PATH"]

    def _script(self, name: str, body: str) -> None:
        script = self.bin / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)

    def dev_test(self, *args: str) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "PATH": self.path,
            "ULTIMATE_JOBS_BROWSER_DIR": str(self.browser),
        }
        return subprocess.run(
            ["/bin/bash", str(DEV), "test", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def apt_calls(self) -> list[str]:
        if not self.apt_log.exists():
            return []
        return self.apt_log.read_text().splitlines()


def test_not_root_stops_before_anything_with_the_command(tmp_path):
    """No browser, not root: exit 2, the sudo command on stderr, apt never run."""
    machine = Machine(tmp_path, uid=1000, apt=True)
    done = machine.dev_test()
    assert done.returncode == 2, done.stderr
    assert SUDO_COMMAND in done.stderr
    assert machine.apt_calls() == []
    # Stopped before anything: no venv, no database, no pytest.
    assert done.stderr.count("\n") == 1 and done.stdout == ""


def test_without_apt_it_says_how_to_leave_the_browser_tests_out(tmp_path):
    """No browser and no apt-get (not Debian): exit 2, naming the folder and --ignore."""
    machine = Machine(tmp_path, uid=1000, apt=False, full_path=False)
    done = machine.dev_test()
    assert done.returncode == 2, done.stderr
    assert f"{machine.browser}/chromedriver" in done.stderr
    assert "./dev test --ignore=tests/test_admin_browser.py" in done.stderr


@pytest.mark.slow
def test_root_with_apt_installs_says_so_on_one_line_then_runs(tmp_path):
    """Root with apt: update, install both packages (one line said), then pytest."""
    machine = Machine(tmp_path, uid=0, apt=True)
    done = machine.dev_test("tests/test_admin_browser.py", "--collect-only", "-q")
    assert done.returncode == 0, done.stderr
    assert machine.apt_calls() == [
        "update -qq",
        "install -y -qq chromium chromium-driver",
    ]
    said = [line for line in done.stderr.splitlines() if "apt-get" in line]
    assert said == [
        "dev: installing chromium chromium-driver with apt-get for the admin's "
        "browser tests (a minute or two)"
    ]
    assert "test_admin_browser.py::" in done.stdout  # pytest ran after it


@pytest.mark.slow
def test_tests_that_leave_the_browser_out_run_without_it(tmp_path):
    """A path without the browser tests runs as any user, with no browser."""
    machine = Machine(tmp_path, uid=1000, apt=True)
    done = machine.dev_test("tests/test_sql_loader.py", "--collect-only", "-q")
    assert done.returncode == 0, done.stderr
    assert machine.apt_calls() == []
    assert "test_sql_loader.py::" in done.stdout
