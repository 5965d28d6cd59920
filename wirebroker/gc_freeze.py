"""The broker's long-lived state left out of the cyclic collector's passes (`gc.freeze`).

Frozen objects are still freed by reference counting; only a reference cycle among them that
becomes garbage later stays until a restart, so the state a deleted topic leaves behind must
hold none (a segment and its file handle's close callback let go of each other once the
handle is detached: `tests/storage/test_partition_log.py`). A creation's
freeze collects first (`collect`), so garbage cycles of the moment are not frozen with it; the
start-up freeze does not, to keep start-up short (its garbage is bounded: it happens once). Their
files are closed explicitly, never by the collector. `wirebroker serve` freezes what start-up
made once it serves (`wirebroker.cli`), and then, with `Broker.freeze_created` on, what each
creation of partitions made once it settled: the logs and partitions of a CreateTopics,
CreatePartitions or auto-creation (`Broker.create_logs`), or of a LeaderAndIsr that made
partitions here (a new replica, or in a cluster every partition after a start). About 52
objects a partition would otherwise stay in the young generations, walked by every
collection of theirs until a full pass moved them. One freeze per creation, not per
partition: `gc.freeze` moves whole generations, whatever their size. Off in an in-process
broker (tests): the collector is the process's.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze(what: str, *, collect: bool = False) -> int:
    """Freeze every object the collector tracks now; how many that was (logged as `what`).

    With `collect`, a full collection first: garbage cycles alive at that moment would
    otherwise be frozen with the rest and never freed. After the start-up freeze that pass walks
    only what was made since the last freeze, about what is about to be frozen."""
    if collect:
        gc.collect()
    before = gc.get_freeze_count()
    gc.freeze()
    frozen = gc.get_freeze_count() - before
    log.info("%s (%d objects) left out of the garbage collector's passes", what, frozen)
    return frozen
