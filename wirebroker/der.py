"""DER, as this broker reads it itself: the elements of an encoding (tag and contents) and object
identifiers, for `wirebroker.pkcs12` (a store's bags), `wirebroker.jks` (a key's
EncryptedPrivateKeyInfo) and `wirebroker.certificate_entries` (a certificate's subject as Java
prints it), where `cryptography` does not give what Java sees.

Definite lengths of up to four bytes only (DER has no other kind); anything malformed is a
`DerError` saying what, never another exception.
"""

from __future__ import annotations

from typing import NamedTuple

SEQUENCE, SET, OID, OCTETS, INTEGER, BMP = 0x30, 0x31, 0x06, 0x04, 0x02, 0x1E
EXPLICIT_0, IMPLICIT_0 = 0xA0, 0x80


class DerError(ValueError):
    """An encoding that cannot be read; the message says why."""


class Der(NamedTuple):
    """One element: its tag (the identifier octet) and its contents."""

    tag: int
    contents: bytes

    def encoded(self) -> bytes:
        """The element as encoded (tag, length and contents)."""
        size = len(self.contents)
        if size < 0x80:
            return bytes([self.tag, size]) + self.contents
        length = size.to_bytes((size.bit_length() + 7) // 8, "big")
        return bytes([self.tag, 0x80 | len(length)]) + length + self.contents


def parse(der: bytes) -> list[Der]:
    """The elements `der` holds one after another."""
    out = []
    offset = 0
    while offset < len(der):
        if len(der) - offset < 2:
            raise DerError("an element is truncated")
        tag, length = der[offset], der[offset + 1]
        offset += 2
        if length == 0x80:
            raise DerError("the encoding is BER with indefinite lengths, not DER")
        if length & 0x80:
            count = length & 0x7F
            if count > 4 or len(der) - offset < count:
                raise DerError("an element's length is malformed")
            length = int.from_bytes(der[offset : offset + count], "big")
            offset += count
        if length > len(der) - offset:
            raise DerError("an element is truncated")
        out.append(Der(tag, der[offset : offset + length]))
        offset += length
    return out


def single(der: Der | bytes, tag: int) -> bytes:
    """The contents of the one element of `tag` that `der` (an element's contents) is."""
    elements = parse(der.contents if isinstance(der, Der) else der)
    if len(elements) != 1 or elements[0].tag != tag:
        raise DerError(f"expected one element of tag {tag:#x}")
    return elements[0].contents


def fields(der: bytes, tag: int) -> list[Der]:
    """The elements inside the one constructed element of `tag` that `der` is."""
    return parse(single(der, tag))


def oid(dotted: str) -> bytes:
    """The DER contents of an OBJECT IDENTIFIER."""
    first, second, *rest = (int(p) for p in dotted.split("."))
    out = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        while arc := arc >> 7:
            chunk.append(0x80 | arc & 0x7F)
        out += bytes(reversed(chunk))
    return bytes(out)


def dotted(contents: bytes) -> str:
    """An OBJECT IDENTIFIER's contents in dotted form."""
    arcs = []
    value = 0
    for byte in contents:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        return "?"
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))
