"""A message encoded with one array of structs given as its items' bytes, encoded ahead.

A handler that keeps what it tells (the Metadata handler keeps each topic) keeps the items'
encodings too (:func:`item_bytes`, the generated element encoder, once per version) and has
the answer written with them spliced in (:func:`write_spliced`): the message is encoded by its
generated codec with the array empty, and the empty array's length is replaced by the array's
length and the items' bytes. Where that length sits is known from the struct's fields: only
fixed-width fields (and, in a flexible version, the empty tagged fields) may follow the array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from protocol.errors import EncodeError
from protocol.primitives import Writer
from protocol.schema import Message, Struct, unknown_tags

__all__ = ["item_bytes", "write_spliced"]

#: The fixed-width field types' sizes.
_WIDTHS: Final = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}
#: (message class, array field, version) -> how many bytes follow the array's encoding.
_TAILS: dict[tuple[type[Message], str, int], int] = {}


def item_bytes(item: Struct, version: int) -> bytes:
    """One struct's encoding as an array item at `version` (what :func:`write_spliced` takes)."""
    w = Writer()
    item._write(w, version)
    return bytes(w.buf)


def write_spliced(
    w: Writer, body: Message, version: int, field: str, items: Sequence[bytes]
) -> None:
    """Write `body` at `version` with its array `field` made of `items` (each an encoded item):
    as `body.write_to` would with the structs, whatever `field` holds."""
    if unknown_tags(body):
        raise EncodeError(f"{type(body).__name__} with unknown tagged fields: not spliced")
    tail = _tail(type(body), field, version)
    told = getattr(body, field)
    setattr(body, field, [])
    try:
        body.write_to(w, version)
    finally:
        setattr(body, field, told)
    flexible = body.is_flexible(version)
    length = Writer()
    length.array_length(items, compact=flexible, nullable=False)
    buf = w.buf
    end = len(buf) - tail
    buf[end - (1 if flexible else 4) : end] = length.buf + b"".join(items)


def _tail(cls: type[Message], field: str, version: int) -> int:
    key = (cls, field, version)
    tail = _TAILS.get(key)
    if tail is None:
        if any(f.tagged_in(version) for f in cls.FIELDS):
            raise EncodeError(f"{cls.__name__} v{version} has tagged fields: not spliced")
        names = [f.name for f in cls.FIELDS]
        tail = 1 if cls.is_flexible(version) else 0  # the empty tagged fields
        for f in cls.FIELDS[names.index(field) + 1 :]:
            if f.present_in(version):
                if f.type not in _WIDTHS:
                    raise EncodeError(f"{cls.__name__}.{f.name} follows {field}: not fixed-width")
                tail += _WIDTHS[f.type]
        _TAILS[key] = tail
    return tail
