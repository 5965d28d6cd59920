"""The mypyc build of the hot modules runs only while it matches the sources, and the broker
says which it runs (`wirebroker.compiled`).

The finder's checks run on a copy of the sources with a manifest of their hashes (no compiler
needed); the broker tests use the venv's real build (`make setup` makes it), and skip, saying
why, where there is none (``WIREBROKER_PURE=1 make setup``). The test run itself imports the
build, unless ``WIREBROKER_PURE=1`` asks for Python: anything else fails. A build made elsewhere (``--prebuilt``, how the Docker
image gets the host's) is installed into a venv holding the packages as a wheel installs them;
`tests/containers` checks the image itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from tests.broker_process import broker_process
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

IMPORT_ALL = "import sys; " + "; ".join(f"import {m}" for m in MODULES)
PRINT_FILES = IMPORT_ALL + f"; print('\\n'.join(sys.modules[m].__file__ for m in {MODULES!r}))"


def sources_with_manifest(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sources and a build directory whose manifest matches them (its libraries
    empty files: these tests never load them)."""
    root, build = tmp_path / "src", tmp_path / "build"
    lines = []
    for module in MODULES:
        copy = source_path(root, module)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_path(SOURCE_ROOT, module), copy)
        lines.append(f"{digest(copy)} {module}\n")
        library = source_path(build, module).with_suffix(EXTENSION_SUFFIXES[0])
        library.parent.mkdir(parents=True, exist_ok=True)
        library.touch()
    (build / f"{GROUP}__mypyc{EXTENSION_SUFFIXES[0]}").touch()
    (build / MANIFEST).write_text("".join(lines))
    return root, build


def test_a_matching_build_serves_every_module_and_the_group(tmp_path: Path) -> None:
    root, build = sources_with_manifest(tmp_path)
    finder = CompiledFinder(build, root)
    for name in (*MODULES, f"{GROUP}__mypyc"):
        spec = finder.find_spec(name)
        assert spec is not None and spec.origin is not None
        assert Path(spec.origin).is_relative_to(build) and spec.origin.endswith(".so")
    assert finder.find_spec("protocol.records") is None  # not compiled
    assert finder.refusal == ""


def test_an_edited_source_runs_every_module_as_python(tmp_path: Path) -> None:
    """The modules call each other natively: one stale source and none is served."""
    root, build = sources_with_manifest(tmp_path)
    edited = source_path(root, "protocol.record_batch")
    edited.write_text(edited.read_text() + "\n# edited\n")
    finder = CompiledFinder(build, root)
    assert all(finder.find_spec(name) is None for name in (*MODULES, f"{GROUP}__mypyc"))
    assert finder.refusal == f"{edited} changed since the build (make setup rebuilds it)"


def test_no_build_a_missing_library_or_another_manifest_is_refused(tmp_path: Path) -> None:
    root, build = sources_with_manifest(tmp_path)
    assert CompiledFinder(tmp_path / "none", root).find_spec(MODULES[0]) is None
    (build / f"{GROUP}__mypyc{EXTENSION_SUFFIXES[0]}").unlink()
    finder = CompiledFinder(build, root)
    assert finder.find_spec(MODULES[0]) is None
    assert finder.refusal is not None and "is missing" in finder.refusal
    (build / f"{GROUP}__mypyc{EXTENSION_SUFFIXES[0]}").touch()
    (build / MANIFEST).write_text((build / MANIFEST).read_text().replace(MODULES[0], "x.y"))
    finder = CompiledFinder(build, root)
    assert finder.find_spec(MODULES[0]) is None
    assert finder.refusal is not None and "names other modules" in finder.refusal


def test_this_run_imports_the_build_unless_told_not_to() -> None:
    """`make setup` builds the modules or says it failed: a run testing pure Python without
    WIREBROKER_PURE=1 (a stale or refused build, a module imported before the finder) fails."""
    for module in MODULES:
        __import__(module)
    files = [sys.modules[m].__file__ for m in MODULES]
    if os.environ.get(PURE_ENV) == "1":
        assert files == [str(source_path(SOURCE_ROOT, m)) for m in MODULES], describe()
    else:
        assert all(f and Path(f).is_relative_to(BUILD_DIR) for f in files), (
            f"this run imports {describe()}: run make setup, or set {PURE_ENV}=1 to test pure "
            f"Python deliberately"
        )


def venv_build_or_skip() -> None:
    finder = CompiledFinder(BUILD_DIR, SOURCE_ROOT)
    if not finder.usable():
        pytest.skip(f"no usable compiled build: {finder.refusal}")


def test_the_venv_runs_its_build_unless_told_not_to() -> None:
    venv_build_or_skip()

    def files(pure: bool) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != PURE_ENV} | (
            {PURE_ENV: "1"} if pure else {}
        )
        command = [sys.executable, "-c", PRINT_FILES]
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, timeout=60, env=env
        )
        return done.stdout.split()

    assert all(Path(f).is_relative_to(BUILD_DIR) for f in files(pure=False))
    assert files(pure=True) == [str(source_path(SOURCE_ROOT, m)) for m in MODULES]


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_the_broker_logs_which_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: bool
) -> None:
    venv_build_or_skip()
    if pure:
        monkeypatch.setenv(PURE_ENV, "1")
    else:
        monkeypatch.delenv(PURE_ENV, raising=False)
    expected = f"pure Python ({PURE_ENV}=1)" if pure else "compiled with mypyc (protocol.varint"
    with broker_process(tmp_path) as broker:
        assert broker.wait_for_log(f"record path and codec primitives: {expected}"), broker.log


def installed_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv with protocol, storage and wirebroker in its site-packages, byte for byte as their
    wheel installs them (the dependencies on a path to this venv's); its python and
    site-packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    for package in ("protocol", "storage", "wirebroker"):
        shutil.copytree(
            SOURCE_ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def prebuilt(python: Path, build: Path) -> str:
    said = run(python, "-m", "wirebroker.compiled_build", "--prebuilt", str(build))
    return said.removeprefix("record path and codec primitives: ")


def run(python: Path, *args: str) -> str:
    """`python` run outside this tree (``-m`` and ``-c`` put the working directory first)."""
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    done = subprocess.run(
        [python, *args], capture_output=True, text=True, check=True, timeout=120, env=env, cwd="/"
    )
    return done.stdout.strip()


def test_an_installed_package_runs_a_prebuilt_build(tmp_path: Path) -> None:
    """The image's case: the finder looks beside the installed sources and in the venv's prefix."""
    venv_build_or_skip()
    python, site = installed_venv(tmp_path)
    assert run(python, "-m", "wirebroker.compiled_build", "--status") == (
        "pure Python (no compiled build in this environment)"
    )
    assert prebuilt(python, BUILD_DIR).startswith("compiled with mypyc (protocol.varint")
    build = tmp_path / "venv" / "compiled"
    assert (site / PTH).exists() and (build / MANIFEST).exists()
    assert all(Path(f).is_relative_to(build) for f in run(python, "-c", PRINT_FILES).split())


def test_a_prebuilt_build_of_other_sources_is_not_installed(tmp_path: Path) -> None:
    _, build = sources_with_manifest(tmp_path)
    python, site = installed_venv(tmp_path)
    edited = source_path(site, "storage.validation")
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert prebuilt(python, build) == (
        f"pure Python ({edited} changed since the build (make setup rebuilds it))"
    )
    assert not (site / PTH).exists() and not (tmp_path / "venv" / "compiled").exists()


def test_a_prebuilt_build_this_python_cannot_load_is_removed(tmp_path: Path) -> None:
    """A build for another interpreter (here: empty libraries) matching the sources is tried in
    a fresh interpreter and removed, never left to fail the broker's imports."""
    _, build = sources_with_manifest(tmp_path)
    python, site = installed_venv(tmp_path)
    said = prebuilt(python, build)
    assert said.startswith(f"pure Python (this interpreter does not run the build in {build}: "), (
        said
    )
    assert "ImportError" in said, said
    assert not (site / PTH).exists() and not (tmp_path / "venv" / "compiled").exists()
    assert run(python, "-c", PRINT_FILES).split() == [str(source_path(site, m)) for m in MODULES]
