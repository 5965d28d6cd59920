"""Storage reads done ahead in a worker thread, so that the event loop then finds what it asks
for in memory or in the page cache: a Fetch's and a ListOffsets' lookups in old segments
(`PartitionLog.lookup_reads`, `timestamp_reads`) and the largest timestamps a retention pass
and the cleaner's `min.compaction.lag.ms` check look at (`LogManager.retention_reads`,
`PartitionLog.compaction_reads`)."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from storage.segment import LookupReads, TimestampReads


async def read_ahead(lookups: Sequence[LookupReads | TimestampReads]) -> None:
    """Do `lookups`' disk reads in a worker thread: each pinned before, finished after."""
    try:
        for reads in lookups:
            reads.pin()
        await trio.to_thread.run_sync(_run_all, lookups)
    finally:
        for reads in lookups:
            reads.finish()


def _run_all(lookups: Sequence[LookupReads | TimestampReads]) -> None:
    for reads in lookups:
        reads.run()
