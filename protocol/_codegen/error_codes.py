"""Render `protocol/error_codes.py` from the specs' `error-codes.tsv`."""

from __future__ import annotations

import csv
from pathlib import Path

from protocol._codegen.render import HEADER


def render_error_codes(tsv: Path) -> str:
    """Return the source of the ErrorCode module for the codes listed in `tsv`."""
    with tsv.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    lines = [
        HEADER.format(source="error-codes.tsv"),
        '"""Every Kafka 3.9 error code, with whether a client may retry it."""',
        "",
        "from __future__ import annotations",
        "",
        "from enum import IntEnum",
        "",
        "",
        "class ErrorCode(IntEnum):",
        '    """A Kafka error code; `retriable` says whether clients retry it."""',
        "",
        "    retriable: bool",
        "    exception_name: str",
        "",
        '    def __new__(cls, code: int, retriable: bool = False, exception_name: str = "") -> ErrorCode:',
        "        member = int.__new__(cls, code)",
        "        member._value_ = code",
        "        member.retriable = retriable",
        "        member.exception_name = exception_name",
        "        return member",
        "",
    ]
    for row in rows:
        retriable = row["retriable"].strip() == "true"
        lines.append(f"    {row['name']} = ({int(row['code'])}, {retriable}, {row['exception']!r})")
    return "\n".join(lines) + "\n"
