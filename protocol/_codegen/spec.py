"""Load Kafka's JSON message specs into a small model the emitter walks.

The specs are JSON with `//` comments. This module owns parsing them, resolving struct
references (inline, common and earlier-defined structs), and the version arithmetic: for each
field, which contiguous version ranges read it as a regular field, as a tagged field, or not at
all, and whether it is nullable or flexibly encoded there.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_VERSION = 0x7FFF

VersionRange = tuple[int, int]

PRIMITIVES = {"int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "bool", "uuid"}
BLOBS = {"string", "bytes", "records"}


def strip_comments(text: str) -> str:
    """Remove `//` comments that are outside JSON strings."""
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(strip_comments(path.read_text()))
    return data


def parse_versions(text: str | None) -> VersionRange | None:
    if text is None or text in ("", "none"):
        return None
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def within(r: VersionRange | None, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


@dataclass
class FieldSpec:
    name: str  # the spec's name
    type: str  # e.g. "int32", "string", "[]int32", "[]TopicData", "LeaderIdAndEpoch"
    versions: VersionRange | None
    nullable_versions: VersionRange | None
    tagged_versions: VersionRange | None
    tag: int | None
    flexible_override: VersionRange | None | bool  # False: no override
    ignorable: bool
    zero_copy: bool
    default: Any  # raw spec default or None when absent
    about: str

    @property
    def attr(self) -> str:
        return snake(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES and self.element not in BLOBS

    def ever_nullable(self) -> bool:
        return self.nullable_versions is not None


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]


@dataclass
class MessageSpec:
    name: str
    kind: str  # request, response, header, data
    api_key: int | None
    valid: VersionRange
    flexible: VersionRange | None
    root: StructSpec
    structs: dict[str, StructSpec] = field(default_factory=dict)  # nested, in definition order
    listeners: list[str] = field(default_factory=list)
    latest_version_unstable: bool = False
    deprecated: VersionRange | None = None
    source: str = ""

    def versions(self) -> range:
        return range(self.valid[0], self.valid[1] + 1)


def _field(raw: dict[str, Any]) -> FieldSpec:
    flex: VersionRange | None | bool = False
    if "flexibleVersions" in raw:
        flex = parse_versions(raw["flexibleVersions"])
    return FieldSpec(
        name=raw["name"],
        type=raw["type"].strip(),
        versions=parse_versions(raw.get("versions")),
        nullable_versions=parse_versions(raw.get("nullableVersions")),
        tagged_versions=parse_versions(raw.get("taggedVersions")),
        tag=raw.get("tag"),
        flexible_override=flex,
        ignorable=bool(raw.get("ignorable", False)),
        zero_copy=bool(raw.get("zeroCopy", False)),
        default="null" if "default" in raw and raw["default"] is None else raw.get("default"),
        about=raw.get("about", ""),
    )


def load_message(path: Path) -> MessageSpec:
    raw = load_json(path)
    msg = MessageSpec(
        name=raw["name"],
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid=parse_versions(raw["validVersions"]) or (0, 0),
        flexible=parse_versions(raw.get("flexibleVersions")),
        root=StructSpec(raw["name"], []),
        listeners=list(raw.get("listeners", [])),
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
        deprecated=parse_versions(raw.get("deprecatedVersions")),
        source=f"{path.parent.name}/{path.name}",
    )
    common = {cs["name"]: cs for cs in raw.get("commonStructs", [])}

    def collect(raw_fields: list[dict[str, Any]]) -> list[FieldSpec]:
        out = []
        for rf in raw_fields:
            f = _field(rf)
            if f.is_struct:
                if "fields" in rf:
                    define(f.element, rf["fields"])
                elif f.element in common:
                    define(f.element, common[f.element]["fields"])
                elif f.element not in msg.structs:
                    raise ValueError(f"{path.name}: unknown struct type {f.element}")
            out.append(f)
        return out

    def define(name: str, raw_fields: list[dict[str, Any]]) -> None:
        if name in msg.structs:
            return
        msg.structs[name] = StructSpec(name, [])  # reserve: keeps definition order stable
        msg.structs[name].fields = collect(raw_fields)

    msg.root.fields = collect(raw.get("fields", []))
    return msg


@dataclass(frozen=True)
class Mode:
    """How a field is read and written in a range of versions."""

    kind: str  # "absent", "regular" or "tagged"
    nullable: bool = False
    flexible: bool = False


def field_modes(f: FieldSpec, msg: MessageSpec) -> list[tuple[int, int, Mode]]:
    """Contiguous (lo, hi, mode) ranges covering all of the message's valid versions."""
    out: list[tuple[int, int, Mode]] = []
    for v in msg.versions():
        msg_flexible = within(msg.flexible, v)
        if f.flexible_override is not False:
            flexible = within(f.flexible_override, v)  # type: ignore[arg-type]
        else:
            flexible = msg_flexible
        if not within(f.versions, v):
            mode = Mode("absent")
        elif f.tag is not None and within(f.tagged_versions, v):
            mode = Mode("tagged", within(f.nullable_versions, v), True)
        else:
            mode = Mode("regular", within(f.nullable_versions, v), flexible)
        if out and out[-1][2] == mode and out[-1][1] == v - 1:
            out[-1] = (out[-1][0], v, mode)
        else:
            out.append((v, v, mode))
    return out
