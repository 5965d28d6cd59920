"""The `wirebroker` command itself (its subcommands have their own tests): `--version` prints
the installed version on stdout and exits 0, as the migration tool's `--version` does."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest


@pytest.mark.parametrize("argv", [["--version"], ["--version", "serve"]])
def test_version_prints_the_installed_version(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wirebroker", *argv], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"wirebroker {version('wirebroker')}\n",
        "",
    )
