"""Emit the Python source of one generated module from MessageSpecs.

Each message becomes a class deriving from `protocol.schema.Message`; each struct it uses is a
top-level class named `<Message>_<Struct>`, reached as `<Message>.<Struct>` (as Kafka's Java
generator nests them), so request and response structs of the same name never collide. The
structs are not nested classes because mypyc compiles no class statement in a class body; the
nested name is a type alias in the message's body (for mypy) and set again by
`protocol.schema.nest` (mypyc drops a class body's aliases). Reading and writing are
straight-line code with version branches computed here, so nothing interprets the schema at run
time.
"""

from __future__ import annotations

import re
from typing import Any

from protocol._codegen.spec import (
    MAX_VERSION,
    FieldSpec,
    MessageSpec,
    Mode,
    StructSpec,
    field_modes,
)

_FIXED_READ = {
    "int8": "r.int8()",
    "int16": "r.int16()",
    "uint16": "r.uint16()",
    "int32": "r.int32()",
    "uint32": "r.uint32()",
    "int64": "r.int64()",
    "float64": "r.float64()",
    "bool": "r.boolean()",
    "uuid": "r.uuid_()",
}
_FIXED_WRITE = {k: v.replace("r.", "w.").replace("()", "({})") for k, v in _FIXED_READ.items()}
# struct codes of the fixed-width types that consecutive fields may share one unpack/pack for
_STRUCT_CODE = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
}
_PY_TYPE = {
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "uint32": "int",
    "int64": "int",
    "float64": "float",
    "bool": "bool",
    "uuid": "uuid.UUID",
    "string": "str",
    "bytes": "bytes",
    "records": "Any",
}


class Emitter:
    def __init__(self, msg: MessageSpec, formats: set[str] | None = None) -> None:
        self.msg = msg
        self.lines: list[str] = []
        #: struct formats the module must define (``_F_<codes>``), shared across messages
        self.formats: set[str] = set() if formats is None else formats

    def run_code(self, f: FieldSpec) -> str | None:
        """The struct code of a field that is the same fixed-width value in every version.

        Runs of such fields are read with one ``Reader.fixed`` and written with one pack.
        """
        if f.is_array or f.is_struct or f.type not in _STRUCT_CODE:
            return None
        # (flexible versions read fixed-width fields the same way: only presence matters)
        if any(mode.kind != "regular" for _, _, mode in field_modes(f, self.msg)):
            return None
        return _STRUCT_CODE[f.type]

    def fixed_run(self, run: list[tuple[FieldSpec, str]], b: str, write: bool) -> None:
        """Emit one read or write for a run of consecutive fixed-width fields."""
        if not run:
            return
        if len(run) == 1:
            f = run[0][0]
            if write:
                self.lines.append(b + _FIXED_WRITE[f.type].format(f"self.{f.attr}"))
            else:
                self.lines.append(f"{b}self.{f.attr} = {_FIXED_READ[f.type]}")
            return
        codes = "".join(code for _, code in run)
        self.formats.add(codes)
        attrs = [f"self.{f.attr}" for f, _ in run]
        if write:
            self.lines.append(f"{b}w.buf += _pack_{codes}({', '.join(attrs)})")
        else:
            self.lines.append(f"{b}{', '.join(attrs)} = r.fixed(_F_{codes})")
        run.clear()

    # naming ------------------------------------------------------------------------------
    def qual(self, struct_name: str) -> str:
        """The public spelling of a struct (annotations, messages)."""
        return f"{self.msg.name}.{struct_name}"

    def top(self, struct_name: str) -> str:
        """The module-level class of a struct (what the generated code calls)."""
        return f"{self.msg.name}_{struct_name}"

    def flex_cond(self) -> str | None:
        """A condition on `version` that is true in flexible versions (None: never)."""
        f = self.msg.flexible
        lo, hi = self.msg.valid
        if f is None or f[0] > hi:
            return None
        if f[0] <= lo:
            return "True"
        return f"version >= {f[0]}"

    # types and defaults ------------------------------------------------------------------
    def py_type(self, f: FieldSpec) -> str:
        if f.is_array:
            inner = self.qual(f.element) if f.is_struct else _PY_TYPE[f.element]
            t = f"list[{inner}]"
        elif f.is_struct:
            t = self.qual(f.element)
        elif f.type == "bytes" and f.zero_copy:
            t = "bytes | memoryview"
        else:
            t = _PY_TYPE[f.type]
        if f.ever_nullable() and t != "Any":
            t += " | None"
        return t

    def default_expr(self, f: FieldSpec) -> str:
        d = f.default
        if d == "null" or f.type == "records":
            return "None"
        if f.is_array:
            return "[]"
        if f.is_struct:
            return f"{self.top(f.element)}()"
        t = f.type
        if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
            return str(int(d, 0) if isinstance(d, str) and d else int(d or 0))
        if t == "float64":
            return repr(float(d or 0.0))
        if t == "bool":
            return "True" if d in (True, "true") else "False"
        if t == "uuid":
            return "ZERO_UUID"
        if t == "string":
            return repr(d if isinstance(d, str) else "")
        if t == "bytes":
            return 'b""'
        raise ValueError(f"no default for {f.type}")

    def is_mutable_default(self, f: FieldSpec) -> bool:
        return f.default != "null" and (f.is_array or f.is_struct)

    def non_default(self, f: FieldSpec, value: str) -> str:
        d = self.default_expr(f)
        if d == "None":
            return f"{value} is not None"
        if f.type == "bytes":
            return f"{value} is None or len({value}) != 0"
        if f.is_struct and not f.is_array:
            return f"not {value}._is_default()"
        if d in ("True", "False"):
            return f"not {value}" if d == "True" else f"{value}"
        return f"{value} != {d}"

    def is_default(self, f: FieldSpec, value: str) -> str:
        d = self.default_expr(f)
        if d == "None":
            return f"{value} is None"
        if f.type == "bytes":
            return f"({value} is not None and len({value}) == 0)"
        if f.is_struct and not f.is_array:
            return f"{value}._is_default()"
        if d in ("True", "False"):
            return f"{value}" if d == "True" else f"not {value}"
        return f"{value} == {d}"

    # reading -----------------------------------------------------------------------------
    def read_expr(self, f: FieldSpec, mode: Mode) -> str:
        n, flex = mode.nullable, mode.flexible
        nul = "nullable_" if n else ""
        if f.is_array:
            if f.is_struct:
                item = f"{self.top(f.element)}._read"
            elif f.element == "string":
                item = "read_compact_string_item" if flex else "read_string_item"
            else:
                item = f"read_{f.element}_item"
            kind = ("compact_" if flex else "") + nul + "array"
            return f"r.{kind}({item}, version)"
        if f.is_struct:
            read = f"{self.top(f.element)}._read(r, version)"
            return f"({read} if r.int8() >= 0 else None)" if n else read
        if f.type in _FIXED_READ:
            return _FIXED_READ[f.type]
        prefix = ("compact_" if flex else "") + nul
        if f.type == "string":
            return f"r.{prefix}string()"
        if f.type == "records" or f.zero_copy:
            return f"r.{prefix}view()"
        return f"r.{prefix}blob()"

    # writing -----------------------------------------------------------------------------
    def write_stmts(self, f: FieldSpec, mode: Mode, value: str, w: str = "w") -> list[str]:
        n, flex = mode.nullable, mode.flexible
        nul = "nullable_" if n else ""
        if f.is_array:
            item_name = value.rsplit(".", 1)[-1] + "_item"
            out = [f"{w}.array_length({value}, compact={flex}, nullable={n})"]
            # array_length raised for None where the version is not nullable; `or ()` is for mypy
            iterated = f"{value} or ()" if f.ever_nullable() and not n else value
            body: list[str]
            if f.is_struct:
                body = [f"for {item_name} in {iterated}:", f"    {item_name}._write({w}, version)"]
            elif f.element == "string":
                body = [
                    f"for {item_name} in {iterated}:",
                    f"    {w}.{'compact_' if flex else ''}string({item_name})",
                ]
            else:
                body = [
                    f"for {item_name} in {iterated}:",
                    f"    {_FIXED_WRITE[f.element].format(item_name)}",
                ]
                body[1] = "    " + body[1].strip().replace("w.", f"{w}.", 1)
            if n:
                out += [f"if {value} is not None:"] + ["    " + b for b in body]
            else:
                out += body
            return out
        if f.is_struct:
            if n:
                return [
                    f"if {value} is None:",
                    f"    {w}.int8(-1)",
                    "else:",
                    f"    {w}.int8(1)",
                    f"    {value}._write({w}, version)",
                ]
            return [f"{value}._write({w}, version)"]
        if f.type in _FIXED_WRITE:
            return [_FIXED_WRITE[f.type].format(value).replace("w.", f"{w}.", 1)]
        if f.type == "records":
            return [f"{w}.records({value}, compact={flex}, nullable={n})"]
        prefix = ("compact_" if flex else "") + nul
        kind = "string" if f.type == "string" else "blob"
        return [f"{w}.{prefix}{kind}({value})"]

    # version branches --------------------------------------------------------------------
    @staticmethod
    def branches(ranges: list[tuple[int, int, Any]]) -> list[tuple[str | None, Any]]:
        """(condition, payload) pairs for an if/elif/else chain over contiguous ranges."""
        ordered = sorted(ranges, key=lambda x: -x[0])
        out: list[tuple[str | None, Any]] = []
        for i, (lo, _hi, payload) in enumerate(ordered):
            out.append((None if i == len(ordered) - 1 else f"version >= {lo}", payload))
        return out

    @staticmethod
    def chain(branches: list[tuple[str | None, list[str]]], indent: str) -> list[str]:
        # drop trailing empty branches, collapse a single unconditional one
        live: list[tuple[str | None, list[str]]] = []
        for cond, body in branches:  # descending versions: equal neighbours merge downwards
            if live and live[-1][1] == body:
                live[-1] = (cond, body)
            else:
                live.append((cond, body))
        if all(not body for _, body in live):
            return []
        if len(live) == 1:
            return [indent + line for line in live[0][1]]
        out: list[str] = []
        for i, (cond, body) in enumerate(live):
            if cond is None and not body:
                break  # a trailing empty else
            head = "if" if i == 0 else "elif"
            out.append(indent + (f"{head} {cond}:" if cond else "else:"))
            out += [indent + "    " + line for line in (body or ["pass"])]
        return out

    # one struct --------------------------------------------------------------------------
    def struct(self, s: StructSpec, root: bool) -> None:
        L = self.lines.append
        qual = self.msg.name if root else self.qual(s.name)
        if not root:
            L("")
            L("")
            L(f"class {self.top(s.name)}(Struct):")
            L(f'    """A {s.name} of {self.msg.name} ({qual})."""')
            L("")
        ind = "    "
        slots = [f.attr for f in s.fields] + ["unknown_tagged_fields"]
        L(f"{ind}__slots__ = ({', '.join(repr(x) for x in slots)},)")
        L("")
        for f in s.fields:
            L(f"{ind}{f.attr}: {self.py_type(f)}")
        if s.fields:
            L("")
        # __init__
        params = ["self"]
        if s.fields:
            params.append("*")
        for f in s.fields:
            if self.is_mutable_default(f):
                params.append(f"{f.attr}: {self.py_type(f)} | Default = DEFAULT")
            else:
                params.append(f"{f.attr}: {self.py_type(f)} = {self.default_expr(f)}")
        params.append("unknown_tagged_fields: UnknownTags | None = None")
        L(f"{ind}def __init__({', '.join(params)}) -> None:")
        for f in s.fields:
            if self.is_mutable_default(f):
                L(
                    f"{ind}    self.{f.attr} = {self.default_expr(f)} if {f.attr} is DEFAULT else {f.attr}"
                )
            else:
                L(f"{ind}    self.{f.attr} = {f.attr}")
        L(f"{ind}    self.unknown_tagged_fields = unknown_tagged_fields")
        L("")
        self.read_method(s, qual, ind)
        self.write_method(s, qual, ind)
        L(f"{ind}def _is_default(self) -> bool:")
        checks = [self.is_default(f, f"self.{f.attr}") for f in s.fields]
        checks.append("not self.unknown_tagged_fields")
        L(f"{ind}    return {' and '.join(checks)}")
        L("")

    def read_method(self, s: StructSpec, qual: str, ind: str) -> None:
        L = self.lines.append
        L(f"{ind}@classmethod")
        L(f"{ind}def _read(cls, r: Reader, version: int) -> {qual}:")
        b = ind + "    "
        # object.__new__ refuses a compiled class; mypyc mis-compiles cls.__new__(cls) (an
        # internal error), not a call through a local
        L(f"{b}new = cls.__new__")
        L(f"{b}self = new(cls)")
        tagged: list[tuple[FieldSpec, list[tuple[int, int, Mode]]]] = []
        run: list[tuple[FieldSpec, str]] = []
        for f in s.fields:
            code = self.run_code(f)
            if code is not None:
                run.append((f, code))
                continue
            self.fixed_run(run, b, write=False)
            run.clear()
            modes = field_modes(f, self.msg)
            bodies = []
            for lo, hi, mode in modes:
                if mode.kind == "regular":
                    bodies.append((lo, hi, [f"self.{f.attr} = {self.read_expr(f, mode)}"]))
                else:
                    bodies.append((lo, hi, [f"self.{f.attr} = {self.default_expr(f)}"]))
            self.lines += self.chain(self.branches(bodies), b)
            tagged_ranges = [m for m in modes if m[2].kind == "tagged"]
            if tagged_ranges:
                tagged.append((f, tagged_ranges))
        self.fixed_run(run, b, write=False)
        flex = self.flex_cond()
        if flex is None:
            L(f"{b}self.unknown_tagged_fields = None")
        elif not tagged:
            if flex == "True":
                L(f"{b}self.unknown_tagged_fields = r.unknown_tags_only()")
            else:
                L(f"{b}self.unknown_tagged_fields = r.unknown_tags_only() if {flex} else None")
        else:
            inner = b
            if flex != "True":
                L(f"{b}if {flex}:")
                inner = b + "    "
            L(f"{inner}unknown = None")
            L(f"{inner}for _ in range(r.tag_count()):")
            L(f"{inner}    tag, size = r.tag_header()")
            L(f"{inner}    end = r.pos + size")
            first = True
            for f, ranges in tagged:
                for lo, hi, mode in ranges:
                    cond = f"tag == {f.tag}"
                    if lo > self.msg.valid[0]:
                        cond += f" and version >= {lo}"
                    if hi < min(self.msg.valid[1], MAX_VERSION):
                        cond += f" and version <= {hi}"
                    L(f"{inner}    {'if' if first else 'elif'} {cond}:")
                    L(f"{inner}        self.{f.attr} = {self.read_expr(f, mode)}")
                    L(f"{inner}        r.expect_end_of_tag(end)")
                    first = False
            L(f"{inner}    else:")
            L(f"{inner}        unknown = r.skip_unknown_tag(tag, size, unknown)")
            L(f"{inner}self.unknown_tagged_fields = unknown")
            if flex != "True":
                L(f"{b}else:")
                L(f"{b}    self.unknown_tagged_fields = None")
        L(f"{b}return self")
        L("")

    def write_method(self, s: StructSpec, qual: str, ind: str) -> None:
        L = self.lines.append
        L(f"{ind}def _write(self, w: Writer, version: int) -> None:")
        b = ind + "    "
        tagged: list[tuple[FieldSpec, list[tuple[int, int, Mode]]]] = []
        wrote = False
        run: list[tuple[FieldSpec, str]] = []
        for f in s.fields:
            code = self.run_code(f)
            if code is not None:
                run.append((f, code))
                wrote = True
                continue
            self.fixed_run(run, b, write=True)
            run.clear()
            modes = field_modes(f, self.msg)
            bodies: list[tuple[int, int, list[str]]] = []
            for lo, hi, mode in modes:
                if mode.kind == "regular":
                    bodies.append((lo, hi, self.write_stmts(f, mode, f"self.{f.attr}")))
                elif mode.kind == "absent" and not f.ignorable:
                    bodies.append(
                        (
                            lo,
                            hi,
                            [
                                f"if {self.non_default(f, f'self.{f.attr}')}:",
                                f"    raise not_in_version({qual!r}, {f.attr!r}, version)",
                            ],
                        )
                    )
                else:
                    bodies.append((lo, hi, []))
            lines = self.chain(self.branches(bodies), b)
            self.lines += lines
            wrote = wrote or bool(lines)
            tagged_ranges = [m for m in modes if m[2].kind == "tagged"]
            if tagged_ranges:
                tagged.append((f, tagged_ranges))
        self.fixed_run(run, b, write=True)
        run.clear()
        flex = self.flex_cond()
        unknown_error = [
            "if self.unknown_tagged_fields:",
            f"    raise not_in_version({qual!r}, 'unknown_tagged_fields', version)",
        ]
        if flex is None:
            self.lines += [b + x for x in unknown_error]
            return self._end_method(b)
        inner = b
        if flex != "True":
            L(f"{b}if {flex}:")
            inner = b + "    "
        if not tagged:
            L(f"{inner}w.no_tagged_fields(self.unknown_tagged_fields)")
        else:
            L(f"{inner}tagged: list[tuple[int, bytes]] = []")
            for f, ranges in tagged:
                for lo, hi, mode in ranges:
                    cond = self.non_default(f, f"self.{f.attr}")
                    if lo > self.msg.valid[0]:
                        cond = f"version >= {lo} and ({cond})"
                    if hi < min(self.msg.valid[1], MAX_VERSION):
                        cond = f"version <= {hi} and ({cond})"
                    L(f"{inner}if {cond}:")
                    L(f"{inner}    t = Writer()")
                    for line in self.write_stmts(f, mode, f"self.{f.attr}", w="t"):
                        L(f"{inner}    {line}")
                    L(f"{inner}    tagged.append(({f.tag}, t.getvalue()))")
            L(f"{inner}w.tagged_fields(tagged, self.unknown_tagged_fields)")
        if flex != "True":
            L(f"{b}elif self.unknown_tagged_fields:")
            L(f"{b}    raise not_in_version({qual!r}, 'unknown_tagged_fields', version)")
        L("")

    def _end_method(self, b: str) -> None:
        self.lines.append("")

    # field metadata ----------------------------------------------------------------------
    def fields_table(self, s: StructSpec, qual: str) -> None:
        L = self.lines.append
        L(f"{qual}.FIELDS = (")
        for f in s.fields:
            args = [repr(f.attr), repr(f.type), repr(f.versions)]
            if f.nullable_versions:
                args.append(f"nullable_versions={f.nullable_versions!r}")
            if f.tag is not None:
                args.append(f"tagged_versions={f.tagged_versions!r}")
                args.append(f"tag={f.tag}")
            if f.ignorable:
                args.append("ignorable=True")
            if f.is_struct:
                args.append(f"struct={self.top(f.element)}")
            L(f"    Field({', '.join(args)}),")
        L(")")

    # the message -------------------------------------------------------------------------
    def message(self) -> list[str]:
        m = self.msg
        L = self.lines.append
        for s in m.structs.values():
            self.struct(s, root=False)
        L("")
        L("")
        L(f"class {m.name}(Message):")
        kind = {"request": "request", "response": "response"}.get(m.kind, m.kind)
        L(f'    """Kafka\'s {m.name} ({kind}, v{m.valid[0]}-v{m.valid[1]}), from {m.source}."""')
        L("")
        L(f"    API_KEY = {m.api_key if m.api_key is not None else -1}")
        L(f"    MIN_VERSION = {m.valid[0]}")
        L(f"    MAX_VERSION = {m.valid[1]}")
        flex_min = None if m.flexible is None or m.flexible[0] > m.valid[1] else m.flexible[0]
        L(f"    FLEXIBLE_MIN = {flex_min}")
        L("")
        for s in m.structs.values():
            L(f"    {s.name}: TypeAlias = {self.top(s.name)}")
        if m.structs:
            L("")
        self.struct(m.root, root=True)
        L("")
        if m.structs:
            nested = ", ".join(f"{s.name}={self.top(s.name)}" for s in m.structs.values())
            L(f"nest({m.name}, {nested})")
        for s in m.structs.values():
            self.fields_table(s, self.top(s.name))
        self.fields_table(m.root, m.name)
        return self.lines


_OPTIONAL_IMPORTS = {
    "protocol.primitives": [
        "ZERO_UUID",
        "Reader",
        "UnknownTags",
        "Writer",
        "read_compact_string_item",
        "read_float64_item",
        "read_int8_item",
        "read_int16_item",
        "read_int32_item",
        "read_int64_item",
        "read_string_item",
        "read_uint16_item",
        "read_uuid_item",
    ],
    "protocol.schema": [
        "DEFAULT",
        "Default",
        "Field",
        "Message",
        "Struct",
        "nest",
        "not_in_version",
    ],
}


def _imports(body: str) -> list[str]:
    """Import lines for exactly the names the generated body uses."""
    out = ["from __future__ import annotations", ""]
    if re.search(r"\bstruct\.Struct\(", body):
        out.append("import struct")
        body = re.sub(r"\bstruct\.Struct\(", "(", body)  # not protocol.schema's Struct
    if re.search(r"\buuid\.UUID\b", body):
        out.append("import uuid")
    typing = [n for n in ("Any", "Final", "TypeAlias") if re.search(rf"\b{n}\b", body)]
    if typing:
        out.append(f"from typing import {', '.join(typing)}")
    if out[-1]:
        out.append("")
    for module, names in _OPTIONAL_IMPORTS.items():
        used = [n for n in names if re.search(rf"\b{n}\b", body)]
        if used:
            out.append(f"from {module} import {', '.join(used)}")
    return out


def render_module(header: str, doc: str, messages: list[MessageSpec]) -> str:
    formats: set[str] = set()
    classes: list[str] = []
    for m in messages:
        classes += Emitter(m, formats).message()
    body: list[str] = [""]
    # Runs of fixed-width fields: one bounds check and one unpack (or pack) for the run.
    # (Final: compiled, a native constant instead of a lookup in the module's dict)
    for codes in sorted(formats):
        body.append(f'_F_{codes}: Final = struct.Struct(">{codes}")')
        body.append(f"_pack_{codes}: Final = _F_{codes}.pack")
    body += classes
    body.append("")
    names = ", ".join(repr(m.name) for m in messages)
    body.append(f"__all__ = [{names}]")
    text = "\n".join(body)
    return "\n".join([header, f'"""{doc}"""', "", *_imports(text), text]) + "\n"
