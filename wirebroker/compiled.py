"""The hot pure-Python modules compiled with mypyc: building them, and running the build only
while it matches the sources.

:data:`MODULES` (varints, the codec's Reader and Writer, the v2 record walk and the leader's
append validation; the generated messages' base, the generated codec of the hot messages (the
headers, Produce, Fetch, Metadata) and the request framing that calls it) are plain, typed
Python and stay the one source (the other generated messages run as Python, subclassing the
compiled base). ``make setup`` runs
:mod:`wirebroker.compiled_build`, which compiles them with mypyc (a C compiler and the Python
headers needed) into ``<venv>/compiled/``, never beside the sources, with a manifest of each
source's SHA-256, and puts a ``.pth`` file in the venv that installs :class:`CompiledFinder`
at interpreter start. The finder serves the compiled modules only while every source still has
its manifest's hash: they call each other natively, so it is all of them or none, and an edited
``.py`` runs as Python until the next build (``make setup`` rebuilds when a hash differs).

Without a build (a plain ``pip install``) the same modules run as Python, as they do with
``WIREBROKER_PURE=1`` (A/B runs, the tests in both modes, a checkout on a machine without a C
compiler: there the tests otherwise fail, see :mod:`wirebroker.compiled_build`). An
installed package works the same way (the sources under site-packages, the build in the venv's
prefix): ``make image`` gives the image the host's build (:mod:`wirebroker.compiled_build`,
``--prebuilt``). The broker logs which it runs (:func:`describe`). Why these modules and what the
build gives: docs/perf-notes.md, branches `compiled` and `compiled-codec`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec
from pathlib import Path
from types import ModuleType

__all__ = ["MODULES", "CompiledFinder", "describe", "install", "put_first"]

MODULES = (
    "protocol.varint",
    "protocol.primitives",
    "protocol.record_batch",
    "storage.validation",
    "protocol.schema",
    "protocol.messages.headers",
    "protocol.messages.produce",
    "protocol.messages.fetch",
    "protocol.messages.metadata",
    "protocol.api",
)
#: mypyc's shared library of the group (the per-module libraries load it by this name).
GROUP = "wirebroker_compiled"
SOURCE_ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = Path(sys.prefix) / "compiled"
MANIFEST = "manifest"
#: The venv's file that installs the finder at every interpreter start.
PTH = "wirebroker-compiled.pth"
PURE_ENV = "WIREBROKER_PURE"


def source_path(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    import hashlib  # not at every interpreter start (the .pth imports this module)

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extension(directory: Path, stem: str) -> Path:
    return directory / (stem + EXTENSION_SUFFIXES[0])


class CompiledFinder:
    """A meta path finder serving :data:`MODULES` (and their group library) from a build
    directory, only if every source the build's manifest names still has its hash."""

    def __init__(self, build_dir: Path, source_root: Path) -> None:
        self.build_dir = build_dir
        self.source_root = source_root
        #: None until first asked; then why the build is not used, or "" when it is.
        self.refusal: str | None = None

    def _check(self) -> str:
        manifest = self.build_dir / MANIFEST
        try:
            lines = manifest.read_text().splitlines()
        except OSError:
            return f"no compiled build in {self.build_dir}"
        hashes: dict[str, str] = {}
        for line in lines:
            expected, _, module = line.partition(" ")
            hashes[module] = expected
        if sorted(hashes) != sorted(MODULES):
            return f"{manifest} names other modules than {', '.join(MODULES)}"
        for module in (*MODULES, GROUP + "__mypyc"):
            library = self._library(module)
            if library is None or not library.exists():
                return f"{library} is missing (make setup rebuilds it)"
        for module in MODULES:
            source = source_path(self.source_root, module)
            try:
                if digest(source) != hashes[module]:
                    return f"{source} changed since the build (make setup rebuilds it)"
            except OSError:
                return f"{source} is missing"
        return ""

    def usable(self) -> bool:
        if self.refusal is None:
            self.refusal = self._check()
        return not self.refusal

    def _library(self, name: str) -> Path | None:
        if name == GROUP + "__mypyc":
            return _extension(self.build_dir, name)
        if name in MODULES:
            package, _, stem = name.rpartition(".")
            return _extension(self.build_dir.joinpath(*package.split(".")), stem)
        return None

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        location = self._library(name)
        if location is None or not self.usable():
            return None
        spec = ModuleSpec(name, ExtensionFileLoader(name, str(location)), origin=str(location))
        spec.has_location = True  # sets the module's __file__
        return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (the venv's ``.pth`` calls this at start; a
    venv's ``lib64`` link to ``lib`` runs it twice: one finder)."""
    if os.environ.get(PURE_ENV) != "1" and _finder() is None:
        sys.meta_path.insert(0, CompiledFinder(BUILD_DIR, SOURCE_ROOT))


def put_first() -> None:
    """Put the finder back ahead of the import hooks inserted since start, before anything
    imports :data:`MODULES`: pytest's assertion rewriting hook inserts itself first and loads
    from source the modules of the distributions it marks for rewriting (with the checkout on
    ``sys.path``, as ``python -m pytest`` puts it, this one's are)."""
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)
        sys.meta_path.insert(0, finder)


def _finder() -> CompiledFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, CompiledFinder)), None)


def describe() -> str:
    """Which of :data:`MODULES` run compiled, for the broker's start-up log."""
    loaded = [m for m in MODULES if m in sys.modules]
    compiled = [m for m in loaded if (sys.modules[m].__file__ or "").endswith(".so")]
    if loaded and len(compiled) == len(loaded):
        return f"compiled with mypyc ({', '.join(compiled)})"
    if compiled:
        return f"partly compiled ({', '.join(compiled)}): a module was imported before the finder"
    if os.environ.get(PURE_ENV) == "1":
        return f"pure Python ({PURE_ENV}=1)"
    finder = _finder()
    if finder is None:
        return "pure Python (no compiled build in this environment)"
    if finder.refusal:
        return f"pure Python ({finder.refusal})"
    if loaded:
        return "pure Python (an import hook ahead of the compiled build's loaded them)"
    return "pure Python (not imported yet)"
