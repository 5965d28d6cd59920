"""Small JSON files the broker keeps beside its logs, written so a crash never leaves half a file.

`write_json_atomically` writes a temporary file, fsyncs it, renames it over the old one and
fsyncs the directory: a reader sees the old file or the new one, never a mixture, and once it
returns the new one survives a crash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from storage.checkpoints import fsync_dir


def write_json_atomically(path: Path, obj: Any, *, sort_keys: bool = False) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=sort_keys)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
