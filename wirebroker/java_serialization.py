"""Where one object of Java's serialization stream ends: a JCEKS store's secret-key entry is a
`javax.crypto.SealedObject` written by its own `ObjectOutputStream`, with no length before it,
and the next entry starts right after it (`wirebroker.jks`). The broker never needs what it
holds, only its length, so this follows the stream's grammar (the Java Object Serialization
Specification, chapter 6) over what a sealed key is written in -- objects, their class
descriptors, strings, arrays, references, and the block data and objects a class's own
`writeObject` may add -- and builds nothing.

The classes a descriptor names are not looked up, so an object's fields are read as its
descriptors list them, from the topmost serializable superclass down. Externalizable classes,
enums, proxies, `Class` objects, resets and exceptions are not part of a sealed key and are an
error, as is anything truncated, an unknown back reference or a nesting deeper than
`MAX_DEPTH`; every length is checked against what is left before it is used.
"""

from __future__ import annotations

import struct

_MAGIC = b"\xac\xed\x00\x05"
TC_NULL, TC_REFERENCE, TC_CLASSDESC, TC_OBJECT, TC_STRING, TC_ARRAY = range(0x70, 0x76)
TC_BLOCKDATA, TC_ENDBLOCKDATA, TC_BLOCKDATALONG, TC_LONGSTRING = 0x77, 0x78, 0x7A, 0x7C
_BASE_HANDLE = 0x7E0000
_SC_WRITE_METHOD, _SC_SERIALIZABLE, _SC_EXTERNALIZABLE = 0x01, 0x02, 0x04
#: A field's or an array element's type code -> its size, for the primitive types.
_PRIMITIVE_SIZES = {"B": 1, "Z": 1, "C": 2, "S": 2, "I": 4, "F": 4, "J": 8, "D": 8}
MAX_DEPTH = 32
_U16, _U32, _U64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")


class SerializationError(ValueError):
    """A stream this reader cannot follow; the message says why."""


class _ClassDesc:
    """A class descriptor: its name, flags, fields (type code, and the class name of an object
    field's type), and its superclass's descriptor."""

    __slots__ = ("name", "flags", "fields", "superclass")

    def __init__(self) -> None:
        self.name = ""
        self.flags = 0
        self.fields: list[str] = []
        self.superclass: _ClassDesc | None = None


def object_end(data: bytes, offset: int) -> int:
    """The offset just after the serialization stream (its header and one object) that starts
    at `offset` of `data`."""
    reader = _Reader(data, offset)
    if reader.take(len(_MAGIC)) != _MAGIC:
        raise SerializationError("not a Java serialization stream (no ACED0005 header)")
    reader.content(0)
    return reader.offset


class _Reader:
    __slots__ = ("data", "offset", "handles")

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset
        self.handles: list[_ClassDesc | None] = []  # None: a handle that is not a descriptor

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.offset:
            raise SerializationError("the serialized object is truncated")
        chunk = self.data[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def utf(self) -> str:
        (n,) = _U16.unpack(self.take(2))
        return self.take(n).decode("utf-8", "replace")

    def reference(self) -> _ClassDesc | None:
        (handle,) = _U32.unpack(self.take(4))
        index = handle - _BASE_HANDLE
        if not 0 <= index < len(self.handles):
            raise SerializationError(f"a reference to an unknown handle {handle:#x}")
        return self.handles[index]

    def content(self, depth: int) -> None:
        """One object, string, array, null or back reference."""
        if depth > MAX_DEPTH:
            raise SerializationError(f"objects nested deeper than {MAX_DEPTH}")
        tag = self.u8()
        if tag in (TC_NULL, TC_REFERENCE):
            if tag == TC_REFERENCE:
                self.reference()
        elif tag == TC_STRING:
            self.handles.append(None)
            self.utf()
        elif tag == TC_LONGSTRING:
            self.handles.append(None)
            (n,) = _U64.unpack(self.take(8))
            self.take(n)
        elif tag == TC_OBJECT:
            chain = [self.class_desc(depth)]
            self.handles.append(None)
            while (superclass := chain[-1].superclass) is not None:
                if len(chain) > MAX_DEPTH:
                    raise SerializationError(f"classes nested deeper than {MAX_DEPTH}")
                chain.append(superclass)
            for each in reversed(chain):
                self.class_data(each, depth)
        elif tag == TC_ARRAY:
            desc = self.class_desc(depth)
            self.handles.append(None)
            (length,) = _U32.unpack(self.take(4))
            element = desc.name[1:2]
            if element in _PRIMITIVE_SIZES:
                self.take(length * _PRIMITIVE_SIZES[element])
            elif element in ("L", "["):
                if length > len(self.data) - self.offset:  # each element takes a byte at least
                    raise SerializationError("the serialized object is truncated")
                for _ in range(length):
                    self.content(depth + 1)
            else:
                raise SerializationError(f"an array of the class {desc.name!r}")
        else:
            raise SerializationError(f"a stream element of tag {tag:#x}, not part of a sealed key")

    def class_desc(self, depth: int) -> _ClassDesc:
        """A non-null class descriptor: new, or a back reference to one."""
        desc = self.optional_class_desc(depth)
        if desc is None:
            raise SerializationError("an object or array without a class descriptor")
        return desc

    def optional_class_desc(self, depth: int) -> _ClassDesc | None:
        if depth > MAX_DEPTH:
            raise SerializationError(f"classes nested deeper than {MAX_DEPTH}")
        tag = self.u8()
        if tag == TC_NULL:
            return None
        if tag == TC_REFERENCE:
            desc = self.reference()
            if desc is None:
                raise SerializationError("a class descriptor's reference names no descriptor")
            return desc
        if tag != TC_CLASSDESC:
            raise SerializationError(f"a class descriptor of tag {tag:#x}")
        desc = _ClassDesc()
        self.handles.append(desc)  # its handle comes before its fields' type names
        desc.name = self.utf()
        self.take(8)  # serialVersionUID
        desc.flags = self.u8()
        if desc.flags & _SC_EXTERNALIZABLE or not desc.flags & _SC_SERIALIZABLE:
            raise SerializationError(f"the class {desc.name!r} is not plainly serializable")
        (count,) = _U16.unpack(self.take(2))
        for _ in range(count):
            code = chr(self.u8())
            self.utf()  # the field's name
            if code in ("L", "["):
                self.content(depth + 1)  # its type's name: a string or a reference to one
            elif code not in _PRIMITIVE_SIZES:
                raise SerializationError(f"a field of type code {code!r} in {desc.name!r}")
            desc.fields.append(code)
        self.annotation(depth)
        desc.superclass = self.optional_class_desc(depth + 1)
        return desc

    def class_data(self, desc: _ClassDesc, depth: int) -> None:
        """The values of one class's fields, then what its `writeObject` added."""
        for code in desc.fields:
            if code in _PRIMITIVE_SIZES:
                self.take(_PRIMITIVE_SIZES[code])
            else:
                self.content(depth + 1)
        if desc.flags & _SC_WRITE_METHOD:
            self.annotation(depth)

    def annotation(self, depth: int) -> None:
        """Block data and objects up to the end-of-block marker."""
        while True:
            if self.offset >= len(self.data):
                raise SerializationError("the serialized object is truncated")
            tag = self.data[self.offset]
            if tag == TC_ENDBLOCKDATA:
                self.offset += 1
                return
            if tag == TC_BLOCKDATA:
                self.offset += 1
                self.take(self.u8())
            elif tag == TC_BLOCKDATALONG:
                self.offset += 1
                (n,) = _U32.unpack(self.take(4))
                self.take(n)
            else:
                self.content(depth + 1)
