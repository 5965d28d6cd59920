"""Building :mod:`wirebroker.compiled`'s modules with mypyc: ``python -m wirebroker.compiled_build``.

``make setup`` runs it; it rebuilds only when a source's hash differs from the build's manifest
(or the venv lacks the ``.pth`` that installs the finder). A build that fails (no C compiler,
no Python headers, no mypyc, or a mypyc that crashes on or refuses a module) says why and what
to do, and the modules run as Python: ``make serve`` still works, but the test run refuses it
(``tests/wirebroker/test_compiled.py``), so CI never tests pure Python without saying so. With
``WIREBROKER_PURE=1`` it builds nothing, deliberately. (A plain ``pip install`` runs no
build at all: the modules run as Python, and the broker logs it.)

``--prebuilt DIR`` installs a build made elsewhere instead: the Docker image's (``make image``
passes the host's build, made on the same Debian for CPython 3.11, whose ABI holds across patch
releases; the image's wheel installs the same sources byte for byte). It is taken only if its
manifest matches the installed sources and a fresh interpreter of this environment then runs it;
else nothing is installed and the modules run as Python. ``--status`` prints which this
environment runs (what the broker logs at start).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

from wirebroker.compiled import (
    BUILD_DIR,
    GROUP,
    MANIFEST,
    MODULES,
    PTH,
    PURE_ENV,
    SOURCE_ROOT,
    CompiledFinder,
    describe,
    digest,
    source_path,
)

__all__ = ["build", "install_prebuilt", "status"]

USAGE = "usage: python -m wirebroker.compiled_build [--prebuilt DIR | --status]"


def _pth() -> Path:
    """The venv's ``.pth`` that installs the finder at every interpreter start."""
    return Path(sysconfig.get_paths()["purelib"]) / PTH


def _install_pth() -> None:
    _pth().write_text("import wirebroker.compiled; wirebroker.compiled.install()\n")


def build(build_dir: Path = BUILD_DIR, source_root: Path = SOURCE_ROOT) -> None:
    """Compile :data:`MODULES` into `build_dir` (replaced whole) and install the ``.pth``."""
    from mypyc.build import mypycify
    from setuptools import Distribution  # type: ignore[import-untyped]

    sources = [source_path(source_root, m) for m in MODULES]
    before = [digest(s) for s in sources]
    with tempfile.TemporaryDirectory(prefix="wirebroker-compiled-") as tmp:
        staging = Path(tmp) / "out"
        cwd = os.getcwd()
        os.chdir(source_root)  # mypyc names modules from paths, and reads the mypy config here
        try:
            extensions = mypycify(
                [str(s.relative_to(source_root)) for s in sources],
                group_name=GROUP,
                target_dir=str(Path(tmp) / "c"),
            )
            dist = Distribution({"ext_modules": extensions, "script_name": "wirebroker.compiled"})
            command = dist.get_command_obj("build_ext")
            command.build_lib = str(staging)
            command.build_temp = str(Path(tmp) / "o")
            dist.run_command("build_ext")
        finally:
            os.chdir(cwd)
        if [digest(s) for s in sources] != before:
            raise SystemExit("a source changed during the build: run it again")
        (staging / MANIFEST).write_text(
            "".join(f"{h} {m}\n" for h, m in zip(before, MODULES, strict=True))
        )
        shutil.rmtree(build_dir, ignore_errors=True)
        shutil.move(staging, build_dir)
    _install_pth()


def status() -> str:
    """Which :data:`MODULES` run here (imports them: for a fresh interpreter)."""
    for module in MODULES:
        __import__(module)
    return describe()


def install_prebuilt(prebuilt: Path) -> str:
    """Install the build in `prebuilt` into this environment if it matches the installed sources
    and this interpreter runs it; says what the modules then run as."""
    finder = CompiledFinder(prebuilt, SOURCE_ROOT)
    if not finder.usable():
        return f"pure Python ({finder.refusal})"
    shutil.rmtree(BUILD_DIR, ignore_errors=True)
    shutil.copytree(prebuilt, BUILD_DIR)
    _install_pth()
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}  # -I: none of PYTHON*
    check = subprocess.run(
        [sys.executable, "-I", "-m", "wirebroker.compiled_build", "--status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    said = check.stdout.strip()
    if check.returncode == 0 and said.startswith("compiled"):
        return said
    shutil.rmtree(BUILD_DIR)
    _pth().unlink()
    why = said if check.returncode == 0 else (check.stderr.strip().splitlines() or ["?"])[-1]
    return f"pure Python (this interpreter does not run the build in {prebuilt}: {why})"


def main(argv: Sequence[str]) -> int:
    if argv == ["--status"]:
        print(status())
        return 0
    if len(argv) == 2 and argv[0] == "--prebuilt":
        print(f"record path and codec primitives: {install_prebuilt(Path(argv[1]))}")
        return 0
    if argv:
        print(USAGE, file=sys.stderr)
        return 2
    if os.environ.get(PURE_ENV) == "1":
        print(f"{PURE_ENV}=1: nothing compiled, {', '.join(MODULES)} run as Python")
        return 0
    finder = CompiledFinder(BUILD_DIR, SOURCE_ROOT)
    if finder.usable() and _pth().exists():
        print(f"compiled build in {BUILD_DIR} is up to date")
        return 0
    print(f"compiling {', '.join(MODULES)} with mypyc into {BUILD_DIR} ({finder.refusal})")
    try:
        build()
    except (Exception, SystemExit) as e:  # no compiler, no headers, a mypyc error
        print(
            f"the compiled build failed: {type(e).__name__}: {e}\n"
            f"These modules run as Python (slower), and make test fails until this is fixed. "
            f"The build needs a C compiler, the Python headers and the mypy (mypyc) that "
            f"pyproject.toml's dev extra pins. To run them as Python deliberately, set "
            f"{PURE_ENV}=1 (for make setup, the tests and the broker alike).",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
