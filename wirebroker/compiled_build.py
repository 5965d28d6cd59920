"""Building :mod:`wirebroker.compiled`'s modules with mypyc: ``python -m wirebroker.compiled_build``.

``make setup`` runs it; it rebuilds only when a source's hash differs from the build's manifest
(or the venv lacks the ``.pth`` that installs the finder). Without a C compiler, the Python
headers or mypyc, or when mypyc refuses an edited module, it says so and exits 0: the modules
then run as Python.
"""

from __future__ import annotations

import os
import shutil
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
    SOURCE_ROOT,
    CompiledFinder,
    digest,
    source_path,
)

__all__ = ["build"]


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
    site = Path(sysconfig.get_paths()["purelib"])
    (site / PTH).write_text("import wirebroker.compiled; wirebroker.compiled.install()\n")


def main(argv: Sequence[str]) -> int:
    if argv:
        print("usage: python -m wirebroker.compiled_build", file=sys.stderr)
        return 2
    finder = CompiledFinder(BUILD_DIR, SOURCE_ROOT)
    if finder.usable() and (Path(sysconfig.get_paths()["purelib"]) / PTH).exists():
        print(f"compiled build in {BUILD_DIR} is up to date")
        return 0
    print(f"compiling {', '.join(MODULES)} with mypyc into {BUILD_DIR} ({finder.refusal})")
    try:
        build()
    except (Exception, SystemExit) as e:  # no compiler, no headers, a mypyc error: run as Python
        print(f"the compiled build failed ({e}): these modules run as Python", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
