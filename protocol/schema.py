"""The runtime base of every generated message: field metadata, equality, repr, encode/decode.

This module owns what the generated classes in `protocol/messages/` share. It must not know any
particular message. Each generated struct lists its fields in `FIELDS` (the spec's versions,
nullability and tags, already parsed) and implements `_read(reader, version)` and
`_write(writer, version)` with straight-line code; this base wraps them with version checks and
turns low-level decoding failures into :class:`ProtocolError`.

`make setup` compiles it with mypyc, with the hot messages (`wirebroker.compiled`); the other
generated messages stay Python, so :class:`Struct` and :class:`Message` admit interpreted
subclasses.
"""

from __future__ import annotations

import builtins
import enum
import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

from mypy_extensions import mypyc_attr

from protocol.errors import EncodeError, ProtocolError, UnsupportedVersionError
from protocol.primitives import Reader, UnknownTags, Writer


class Default(enum.Enum):
    """The type of :data:`DEFAULT`: a declared type, which a compiled constructor checks."""

    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


#: Marks an argument the caller left out, so that `None` can still mean null.
DEFAULT: Final = Default.DEFAULT

#: The highest version number a "N+" range reaches.
MAX_VERSION = 0x7FFF

VersionRange = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a struct as the spec defines it (versions are inclusive ranges)."""

    name: str
    type: str
    versions: VersionRange | None
    nullable_versions: VersionRange | None = None
    tagged_versions: VersionRange | None = None
    tag: int | None = None
    ignorable: bool = False
    struct: builtins.type[Struct] | None = None
    about: str = ""

    def present_in(self, version: int) -> bool:
        return _within(self.versions, version)

    def nullable_in(self, version: int) -> bool:
        return _within(self.nullable_versions, version)

    def tagged_in(self, version: int) -> bool:
        return _within(self.tagged_versions, version)


def _within(r: VersionRange | None, version: int) -> bool:
    return r is not None and r[0] <= version <= r[1]


_DECODE_FAILURES = (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError)


def unknown_tags(struct: Struct) -> UnknownTags | None:
    """A generated struct's unknown tagged fields, read as Python reads them (see `Struct`)."""
    tags: UnknownTags | None = getattr(struct, "unknown_tagged_fields")  # noqa: B009 (not native)
    return tags


@mypyc_attr(allow_interpreted_subclasses=True)
class Struct:
    """A generated Kafka struct: slots, keyword constructor, value equality."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    # Each generated class holds its own `unknown_tagged_fields`. Declared here, it would be a
    # native attribute of the compiled base that an interpreted subclass's slot shadows, and the
    # compiled methods below would read the base's, never set (mypyc 2.4).

    @classmethod
    def _read(cls, r: Reader, version: int) -> Self:
        raise NotImplementedError

    def _write(self, w: Writer, version: int) -> None:
        raise NotImplementedError

    def _is_default(self) -> bool:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in self.FIELDS) and (
            (unknown_tags(self) or None) == (unknown_tags(other) or None)
        )

    __hash__ = None  # type: ignore[assignment]

    # Copies and pickles: mypyc's own pair for the compiled base would carry only the base's
    # attributes (none of a generated class's fields) and `__hash__`.
    def __getstate__(self) -> dict[str, object]:
        state = {f.name: getattr(self, f.name) for f in self.FIELDS}
        state["unknown_tagged_fields"] = unknown_tags(self)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in self.FIELDS]
        if unknown := unknown_tags(self):
            parts.append(f"unknown_tagged_fields={unknown!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"


@mypyc_attr(allow_interpreted_subclasses=True)
class Message(Struct):
    """A top-level message: a request, a response, a header or a stored data record."""

    __slots__ = ()
    API_KEY: ClassVar[int] = -1
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    #: The lowest flexible version, or None when no version is flexible.
    FLEXIBLE_MIN: ClassVar[int | None] = None

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN

    @classmethod
    def check_version(cls, version: int) -> None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnsupportedVersionError(
                f"{cls.__name__} v{version} is outside v{cls.MIN_VERSION}-v{cls.MAX_VERSION}"
            )

    @classmethod
    def read_from(cls, r: Reader, version: int) -> Self:
        """Decode one message from `r` (which may hold more after it)."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            cls.check_version(version)
        try:
            return cls._read(r, version)
        except ProtocolError:
            raise
        except _DECODE_FAILURES as e:
            raise ProtocolError(f"malformed {cls.__name__} v{version}: {e}") from e
        except RecursionError as e:  # pragma: no cover - specs nest only a few levels
            raise ProtocolError(f"{cls.__name__} nests too deeply") from e

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        """Decode exactly one message occupying all of `data`."""
        r = Reader(data)
        msg = cls.read_from(r, version)
        if r.pos != r.end:
            raise ProtocolError(f"{r.end - r.pos} bytes left after {cls.__name__} v{version}")
        return msg

    def write_to(self, w: Writer, version: int) -> None:
        if not self.MIN_VERSION <= version <= self.MAX_VERSION:
            raise EncodeError(
                f"{type(self).__name__} has no v{version} (v{self.MIN_VERSION}-v{self.MAX_VERSION})"
            )
        try:
            self._write(w, version)
        except EncodeError:
            raise
        except (struct.error, OverflowError, AttributeError, TypeError) as e:
            raise EncodeError(f"cannot encode {type(self).__name__} v{version}: {e}") from e

    def encode_chunks(self, version: int) -> list[Any]:
        """The encoding as buffers, with `records` values kept as chunks of their own."""
        w = Writer()
        self.write_to(w, version)
        return w.chunks()

    def encode(self, version: int) -> bytes:
        w = Writer()
        self.write_to(w, version)
        return w.getvalue()


def nest(message: type[Message], **structs: type[Struct]) -> None:
    """Make each struct of `message` reachable and shown as ``<Message>.<Struct>``.

    The generated structs are module-level classes (mypyc compiles no nested class); the
    message's body names them with type aliases, which a compiled class does not keep.
    """
    for name, struct_class in structs.items():
        setattr(message, name, struct_class)
        struct_class.__qualname__ = f"{message.__qualname__}.{name}"


def not_in_version(cls_name: str, field: str, version: int) -> EncodeError:
    """The error for a non-default value in a field the version does not have."""
    return EncodeError(f"{cls_name}.{field} has a non-default value but v{version} lacks the field")


@dataclass(frozen=True, slots=True)
class ApiInfo:
    """One Kafka API: its key, versions, and where its generated classes live.

    Classes are imported on first use, so importing the registry stays cheap.
    """

    api_key: int
    name: str
    module: str
    request: str
    response: str
    min_version: int
    max_version: int
    request_flexible_min: int | None
    response_flexible_min: int | None
    listeners: tuple[str, ...]
    latest_version_unstable: bool
    deprecated_versions: VersionRange | None

    def request_class(self) -> type[Message]:
        return _load(self.module, self.request)

    def response_class(self) -> type[Message]:
        return _load(self.module, self.response)

    def request_header_version(self, version: int) -> int:
        """Header v2 for flexible requests, v1 otherwise; v0 only for ControlledShutdown v0."""
        if self.api_key == 7 and version == 0:
            return 0
        flexible = self.request_flexible_min is not None and version >= self.request_flexible_min
        return 2 if flexible else 1

    def response_header_version(self, version: int) -> int:
        """Header v1 for flexible responses, v0 otherwise; ApiVersions responses always v0."""
        if self.api_key == 18:
            return 0
        flexible = self.response_flexible_min is not None and version >= self.response_flexible_min
        return 1 if flexible else 0


_LOADED: dict[tuple[str, str], type[Message]] = {}


def _load(module: str, name: str) -> type[Message]:
    cls = _LOADED.get((module, name))
    if cls is None:  # once per class: importlib's lookup cost more than decoding a header
        import importlib

        cls = getattr(importlib.import_module(module), name)
        _LOADED[module, name] = cls
    return cls
