"""Generate `protocol/messages/` and `protocol/error_codes.py` from Kafka 3.9's specs.

    python -m protocol._codegen [--specs DIR] [--check]

Without --check it (re)writes the generated modules; with --check it writes nothing and exits 1
listing every module that is missing, stale or no longer generated. Output is deterministic and
formatted with the project's pinned ruff, so the committed files are exactly what this produces.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from protocol._codegen.emit import render_module
from protocol._codegen.error_codes import render_error_codes
from protocol._codegen.registry import render_registry
from protocol._codegen.render import HEADER
from protocol._codegen.spec import MessageSpec, load_message, snake

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPECS = ROOT.parent / "shared" / "kafka-3.9-message-specs"
MESSAGES = ROOT / "protocol" / "messages"


def plan(specs: Path) -> dict[Path, str]:
    """Every generated file and its (unformatted) source."""
    out: dict[Path, str] = {}
    by_module: dict[str, list[MessageSpec]] = {}
    apis: list[tuple[MessageSpec, MessageSpec]] = []
    for path in sorted((specs / "clients").glob("*.json")):
        msg = load_message(path)
        if msg.kind in ("request", "response"):
            base = msg.name.removesuffix("Request").removesuffix("Response")
            by_module.setdefault(snake(base), []).append(msg)
        elif msg.kind == "header":
            by_module.setdefault("headers", []).append(msg)
        else:
            by_module.setdefault(snake(msg.name), []).append(msg)
    for sub in ("group-coordinator", "transaction-coordinator"):
        for path in sorted((specs / sub).glob("*.json")):
            msg = load_message(path)
            base = msg.name.removesuffix("Key").removesuffix("Value")
            by_module.setdefault(f"{sub.replace('-', '_')}.{snake(base)}", []).append(msg)
    for module, msgs in sorted(by_module.items()):
        msgs.sort(key=lambda m: (m.kind != "request", m.name))
        target = MESSAGES.joinpath(*module.split(".")).with_suffix(".py")
        sources = ", ".join(m.source for m in msgs)
        doc = _doc(msgs)
        out[target] = render_module(HEADER.format(source=sources), doc, msgs)
        requests = [m for m in msgs if m.kind == "request"]
        responses = [m for m in msgs if m.kind == "response"]
        if requests and responses:
            apis.append((requests[0], responses[0]))
            apis[-1][0].source = f"protocol.messages.{module}"
    for sub in ("group_coordinator", "transaction_coordinator"):
        out[MESSAGES / sub / "__init__.py"] = (
            HEADER.format(source=f"{sub} specs")
            + f'\n"""Records of Kafka\'s {sub.replace("_", " ")}."""\n'
        )
    out[MESSAGES / "__init__.py"] = render_registry(sorted(apis, key=lambda a: a[0].api_key or 0))
    out[ROOT / "protocol" / "error_codes.py"] = render_error_codes(specs / "error-codes.tsv")
    return out


def _doc(msgs: list[MessageSpec]) -> str:
    names = " and ".join(m.name for m in msgs)
    return f"{names}, generated from Kafka 3.9's message specs."


def ruff_format(path: Path, source: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(path), "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"ruff could not format {path}:\n{proc.stderr}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protocol._codegen", description=__doc__)
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS, help="the specs folder")
    parser.add_argument("--check", action="store_true", help="fail if committed output is stale")
    args = parser.parse_args(argv)
    if not (args.specs / "clients").is_dir():
        print(f"no Kafka message specs at {args.specs}", file=sys.stderr)
        return 2
    files = {p: ruff_format(p, s) for p, s in plan(args.specs).items()}
    existing = {p for p in MESSAGES.rglob("*.py")}
    stale = sorted(
        str(p.relative_to(ROOT)) for p, s in files.items() if not p.exists() or p.read_text() != s
    )
    extra = sorted(str(p.relative_to(ROOT)) for p in existing - set(files))
    if args.check:
        for name in stale:
            print(f"stale: {name}")
        for name in extra:
            print(f"not generated any more: {name}")
        if stale or extra:
            print("run `make generate` and commit the result", file=sys.stderr)
            return 1
        print(f"{len(files)} generated files are fresh")
        return 0
    for path, source in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != source:
            path.write_text(source)
    for name in extra:
        (ROOT / name).unlink()
    print(f"wrote {len(stale)} of {len(files)} generated files; removed {len(extra)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
