"""Small JSON files the broker keeps beside its logs, written so a crash never leaves half a file.

`write_json_atomically` writes a temporary file, fsyncs it, renames it over the old one and
fsyncs the directory: a reader sees the old file or the new one, never a mixture, and once it
returns the new one survives a crash. A broker that is serving writes them with
`write_json_in_thread` (the event loop never waits on the disk); each caller keeps the writes
of its file one at a time, in order, under its own lock. `reason` tells a client why a write
failed without telling it the broker's paths.
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import trio

from storage.checkpoints import fsync_dir


def write_json_atomically(path: Path, obj: Any, *, sort_keys: bool = False) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=sort_keys)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


async def write_json_in_thread(path: Path, obj: Any, *, sort_keys: bool = False) -> None:
    """`write_json_atomically` in a worker thread; `obj` must not change meanwhile (a copy taken
    on the loop). Not abandoned if cancelled: the cancellation waits for the write to end."""
    await trio.to_thread.run_sync(partial(write_json_atomically, path, obj, sort_keys=sort_keys))


def reason(error: OSError | None) -> str:
    """An OSError's reason without its path (clients are not told the broker's paths)."""
    return (error.strerror if error is not None else None) or str(error)
