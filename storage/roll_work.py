"""RollWork: the disk work of a log's next roll, done ahead in a worker thread (a chore).

A roll (:mod:`storage.partition_log`) happens on the log's thread, inside the append that
crosses ``segment.bytes`` (or ``segment.ms``, or fills an index): that append must land in the
new segment, so the roll cannot wait. Creating the new segment's ``.log``, ``.index`` and
``.timeindex`` (and sizing them: the indexes to ``segment.index.bytes``, the log to
``segment.bytes`` with ``preallocate``) was the largest disk work left on the event loop
(docs/perf-notes.md). So once the active segment is half way to its roll
(:meth:`LogSegment.half_way_to_roll`) the log asks for this chore: :meth:`RollWork.prepare`
makes those three files, empty and sized, as ``next.log.prepared``, ``next.index.prepared``
and ``next.timeindex.prepared`` in the partition directory, in a worker thread; the roll then
only renames them to the new base offset's names (:meth:`LogSegment.adopt`). Kafka creates
them in the roll, on its request thread.

The prepared files hold no offset in their names and never hold data (a file gets data only
once renamed to a segment's name), so recovery deletes any it finds (a crash, or a shutdown
with a next segment ready) and a new preparation overwrites them. A preparation that fails (a
full disk, the partition deleted meanwhile) is logged and dropped: the roll creates the files
itself then, as before, and fails its append cleanly if it cannot; the log asks again after
its next roll. A preparation made for other sizes than the config's at the roll (a changed
``segment.index.bytes``, ``segment.bytes`` or ``preallocate``) is not adopted either.
:meth:`prepare` touches files only; :meth:`commit` hands the result to the log.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from storage.file_handles import create_file
from storage.layout import prepared_file
from storage.segment import MADE_SUFFIXES

if TYPE_CHECKING:
    from storage.partition_log import PartitionLog

__all__ = ["RollWork"]

log = logging.getLogger(__name__)


class RollWork:
    """The next segment's files of `log`, to make with `sizes` (a
    :class:`~storage.chore.Chore`; see the module doc). Made by
    :meth:`PartitionLog.begin_roll_work`."""

    __slots__ = ("log", "directory", "sizes", "error")

    def __init__(self, log: PartitionLog, directory: Path, sizes: tuple[int, int, int]) -> None:
        self.log = log
        self.directory = directory
        self.sizes = sizes
        #: Why the files could not be made (None: they were).
        self.error: OSError | None = None

    def prepare(self) -> None:
        try:
            for suffix, size in zip(MADE_SUFFIXES, self.sizes, strict=True):
                create_file(prepared_file(self.directory, suffix), size)
        except OSError as e:
            self.error = e

    def abort(self) -> None:
        pass  # three small files: let them be made

    def commit(self) -> None:
        if self.error is not None:
            log.warning(
                "%s: cannot prepare the next segment (the roll will create it): %s",
                self.directory.name,
                self.error,
            )
        self.log._roll_work_done(self)
