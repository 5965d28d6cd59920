"""Reading batch headers out of segment files without decoding the batches.

This module owns the shallow view of a ``.log`` file that every lookup needs: where each batch
starts, how long it is, its first and last offsets, its max timestamp and partition leader
epoch -- for v2 batches and for legacy magic 0/1 entries alike (a legacy entry's offset field is
its last offset; its first offset is only known by decompressing it, so, like Kafka, we use the
offset field for both). It reads with ``os.pread`` in chunks, so a scan of a few kilobytes
costs one system call. It must not verify CRCs (recovery does) nor decode records.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from protocol.errors import CorruptRecordError

__all__ = ["BatchHeader", "iter_file_headers", "parse_header", "read_batch"]

LOG_OVERHEAD = 12
#: Smallest whole entry per magic (offset + size + the message or batch header).
MIN_SIZE = (12 + 14, 12 + 22, 61)
#: Bytes of an entry needed to read the fields below, per magic.
NEED = (18, 26, 43)
_V2 = struct.Struct(">qiibIhiqq")  # baseOffset .. maxTimestamp
_q = struct.Struct(">q")
_i = struct.Struct(">i")
_FIRST_CHUNK = 8 * 1024
_MAX_CHUNK = 256 * 1024


class BatchHeader(NamedTuple):
    """The shallow facts about one batch (or legacy entry) at `position` in a segment."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    magic: int
    max_timestamp: int
    partition_leader_epoch: int


def parse_header(buf: bytes | memoryview, rel: int, position: int) -> BatchHeader:
    """Parse the header at ``buf[rel:]`` (which holds at least ``NEED[magic]`` bytes and the
    entry's size and magic). Raises :class:`CorruptRecordError` on impossible framing."""
    (length,) = _i.unpack_from(buf, rel + 8)
    magic = buf[rel + 16]
    if magic > 2:
        raise CorruptRecordError(f"invalid magic {magic} at position {position}")
    size = length + LOG_OVERHEAD
    if size < MIN_SIZE[magic]:
        raise CorruptRecordError(f"batch size {size} at position {position} is too small")
    if magic == 2:
        base, _len, epoch, _m, _crc, _attrs, lod, _bts, max_ts = _V2.unpack_from(buf, rel)
        if lod < 0:
            raise CorruptRecordError(f"negative lastOffsetDelta at position {position}")
        return BatchHeader(position, size, base, base + lod, 2, max_ts, epoch)
    (offset,) = _q.unpack_from(buf, rel)
    ts = _q.unpack_from(buf, rel + 18)[0] if magic == 1 else -1
    return BatchHeader(position, size, offset, offset, magic, ts, -1)


def iter_file_headers(
    fd: int, start: int, end: int, *, chunk: int = _FIRST_CHUNK
) -> Iterator[BatchHeader]:
    """Yield the headers of the whole batches in ``[start, end)`` of the file.

    Reads `chunk` bytes first (a lookup usually needs about one index interval), doubling
    up to 256 KiB for long scans. Stops silently at a batch that does not fit before `end`
    (a torn tail) and raises :class:`CorruptRecordError` at impossible framing.
    """
    pos = start
    buf = b""
    buf_start = start
    while end - pos >= 17:
        rel = pos - buf_start
        if len(buf) - rel < 43 and buf_start + len(buf) < end:
            buf = os.pread(fd, min(chunk, end - pos), pos)
            chunk = min(chunk * 2, _MAX_CHUNK)
            buf_start = pos
            rel = 0
        if len(buf) - rel < 17:
            return
        magic = buf[rel + 16]
        need = NEED[magic] if magic <= 2 else 17
        if len(buf) - rel < need:
            return
        header = parse_header(buf, rel, pos)
        if pos + header.size > end:
            return
        yield header
        pos += header.size


def read_batch(fd: int, header: BatchHeader) -> bytes:
    """The whole batch `header` describes."""
    data = os.pread(fd, header.size, header.position)
    if len(data) != header.size:
        raise CorruptRecordError(f"batch at position {header.position} is cut short")
    return data
