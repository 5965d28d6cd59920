"""A bounded pool of open file descriptors for segment files, closed least-recently-used first.

This module owns the open/close life of every ``.log`` file descriptor, so that the number of
open files stays near ``max_open`` however many partitions and segments exist (10,000
partitions under a 1024 soft limit). A :class:`FileHandle` names one file; it is opened on
first use and may be closed whenever it is not *pinned*. Pin it (``acquire``) for the length of
an operation -- an append, or a whole non-blocking ``os.sendfile`` loop -- and ``release`` it
after; a pinned descriptor is never closed under you, even when the file is renamed or
unlinked meanwhile (its data stays readable, as on any POSIX system).

If every open descriptor is pinned the pool exceeds ``max_open`` rather than fail; it shrinks
back as pins are released. Not thread-safe: call from one thread (a worker thread may use a
descriptor it holds pinned, e.g. to fsync).

It must not know what the files contain.
"""

from __future__ import annotations

import os
import resource
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["FileHandle", "FileHandles", "create_file", "default_max_open_files"]


def create_file(path: Path, size: int) -> None:
    """Create `path` empty (replacing any file of that name) and, if `size`, extend it to
    `size` bytes (preallocation: a sparse file, its blocks allocated as it is written)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        if size:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


def default_max_open_files() -> int:
    """Half the process's soft ``RLIMIT_NOFILE`` (the rest is left for sockets), 16..8192."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 8192
    return max(16, min(8192, soft // 2))


class FileHandle:
    """One file, opened read-write on demand through its :class:`FileHandles` pool."""

    __slots__ = ("path", "fd", "pins", "_pool", "_detached", "on_close")

    def __init__(self, pool: FileHandles, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self.pins = 0
        self._pool = pool
        self._detached = False
        #: Called after the pool closes the descriptor (lets a segment drop cached indexes).
        self.on_close: Callable[[], None] | None = None

    def acquire(self) -> int:
        """Open if needed, pin, and return the descriptor (valid until the matching release)."""
        return self._pool._acquire(self)

    def release(self) -> None:
        self._pool._release(self)

    @contextmanager
    def use(self) -> Iterator[int]:
        """``with handle.use() as fd:`` -- pinned for the block."""
        fd = self._pool._acquire(self)
        try:
            yield fd
        finally:
            self._pool._release(self)

    def rename(self, new_path: Path) -> None:
        """Rename the file; an open descriptor stays valid and keeps being used."""
        os.rename(self.path, new_path)
        self.path = new_path

    def detach(self, into: list[int] | None = None) -> None:
        """Forget this file: close it now -- or, with `into`, put its descriptor there for
        the caller to close (a worker thread: the close of a deleted segment's file need not
        wait on the log's thread) -- or, if pinned, when its last pin is released."""
        self._detached = True
        self._pool._detach(self, into)

    @property
    def is_open(self) -> bool:
        return self.fd is not None

    def __repr__(self) -> str:
        return f"FileHandle({str(self.path)!r}, fd={self.fd}, pins={self.pins})"


class FileHandles:
    """The pool: at most ``max_open`` unpinned descriptors open, least recently used closed."""

    def __init__(self, max_open: int | None = None) -> None:
        self.max_open = max(1, default_max_open_files() if max_open is None else max_open)
        # Open, unpinned handles, least recently used first.
        self._idle: OrderedDict[FileHandle, None] = OrderedDict()
        self.open_count = 0
        self.opens = 0
        self.evictions = 0

    def handle(self, path: Path) -> FileHandle:
        """A handle for `path` (not opened until used). The file must exist when first used."""
        return FileHandle(self, path)

    def _acquire(self, h: FileHandle) -> int:
        fd = h.fd
        if fd is None:
            if h._detached:
                raise ValueError(f"{h.path} was detached from its file pool")
            self._make_room(1)
            fd = os.open(h.path, os.O_RDWR | os.O_CLOEXEC)
            h.fd = fd
            self.open_count += 1
            self.opens += 1
        elif h.pins == 0:
            del self._idle[h]
        h.pins += 1
        return fd

    def _release(self, h: FileHandle) -> None:
        if h.pins <= 0:
            raise RuntimeError(f"{h.path} released more often than acquired")
        h.pins -= 1
        if h.pins == 0:
            if h._detached:
                self._close(h)
            else:
                self._idle[h] = None
                if self.open_count > self.max_open:
                    self._make_room(0)

    def _detach(self, h: FileHandle, into: list[int] | None) -> None:
        if h.fd is None:
            h.on_close = None  # never opened again (see `_forget`)
        elif h.pins == 0:
            self._idle.pop(h, None)
            if into is None:
                self._close(h)
            else:
                into.append(self._forget(h))

    def _make_room(self, needed: int) -> None:
        idle = self._idle
        while idle and self.open_count + needed > self.max_open:
            victim, _ = idle.popitem(last=False)
            self.evictions += 1
            self._close(victim)

    def _close(self, h: FileHandle) -> None:
        if h.fd is not None:
            os.close(self._forget(h))

    def _forget(self, h: FileHandle) -> int:
        """Take `h`'s open descriptor out of the pool (the caller closes it)."""
        fd = h.fd
        assert fd is not None
        h.fd = None
        self.open_count -= 1
        callback = h.on_close
        if h._detached:
            # Never opened again: let go of its owner (a segment, whose handle refers back to
            # it: a cycle the collector would have to find, and never does in a frozen heap).
            h.on_close = None
        if callback is not None:
            callback()
        return fd

    def close_all(self) -> None:
        """Close every idle descriptor (pinned ones close on their release)."""
        while self._idle:
            h, _ = self._idle.popitem(last=False)
            self._close(h)

    def statistics(self) -> dict[str, int]:
        return {
            "max_open": self.max_open,
            "open": self.open_count,
            "idle": len(self._idle),
            "pinned": self.open_count - len(self._idle),
            "opens": self.opens,
            "evictions": self.evictions,
        }
