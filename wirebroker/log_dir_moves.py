"""Moving a replica between this broker's log directories (Kafka's
``ReplicaManager.alterReplicaLogDirs`` and ``ReplicaAlterLogDirsThread``).

:func:`alter_replica_log_dir` answers one partition of an AlterReplicaLogDirs request: it
checks the topic name's length (INVALID_TOPIC_EXCEPTION when the future directory's name would
pass 255 characters, KAFKA-4893) and the destination (LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR), remembers it for a partition
not hosted yet (REPLICA_NOT_AVAILABLE, Kafka's compatibility answer; the log is created there),
and otherwise starts (or replaces) the move. :func:`run_move` is the task of one move
(:class:`storage.log_move.LogMove`): it makes the future log in a worker thread, then copies
the current log into it while the partition keeps serving -- the slices are taken on the loop,
their bytes read and the follower appends written in worker threads, all moves together no
faster than `replica.alter.log.dirs.io.max.bytes.per.second`, each append starting the
write-back of what it wrote (so that little is left for the flush) -- flushes the copy once
it first catches up, and swaps it in (:meth:`LogManager.replace_current_with_future`) on the
loop, with no await between the caught-up check and the swap; the partition then serves from
the new log, and the checkpoints are written for its new directory at once.
:func:`resume_moves` runs the moves a stop interrupted, from their reopened future logs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode
from storage.checkpoints import fsync_dir
from storage.errors import StorageError, UnexpectedAppendOffsetError
from storage.layout import future_dir_name, partition_dir_name
from storage.log_move import LogMove
from storage.results import FileSlice
from wirebroker.read_ahead import read_ahead
from wirebroker.server import run_off_loop, write_checkpoints

if TYPE_CHECKING:
    from wirebroker.broker import Broker

__all__ = ["alter_replica_log_dir", "resume_moves", "run_move"]

log = logging.getLogger(__name__)

#: How long a move that has caught up waits before trying the swap again (file work on
#: either log under way), or a copy with nothing to read now.
RETRY_S = 0.01


def alter_replica_log_dir(broker: Broker, topic: str, partition: int, path: str) -> ErrorCode:
    """Move the partition's replica into the log directory `path` (see the module doc)."""
    manager = broker.log_manager
    if _valid_partition(topic, partition) and len(future_dir_name(topic, partition)) > 255:
        return ErrorCode.INVALID_TOPIC_EXCEPTION  # Kafka: no future directory name for it
    if "\0" in path:  # names no directory (resolving it raises): none of ours, as in Kafka
        return ErrorCode.LOG_DIR_NOT_FOUND
    wanted = Path(path).resolve()  # a relative one from the working directory, as Kafka's
    dest = next((d for d in manager.log_dirs if d.resolve() == wanted), None)
    if dest is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if dest in manager.offline_dirs:
        return ErrorCode.KAFKA_STORAGE_ERROR
    tp = (topic, partition)
    current = manager.get(topic, partition)
    current_dir = manager.log_dir_of(topic, partition)
    if current is not None and (current.offline or current_dir in manager.offline_dirs):
        return ErrorCode.KAFKA_STORAGE_ERROR
    move = manager.moves.get(tp)
    if move is not None and move.dest_dir != dest:
        manager.drop_move(move)  # Kafka: futureReplicaDirChanged
    if current is None or broker.partition(topic, partition) is None:
        if _valid_partition(topic, partition):  # created there later
            manager.preferred_dirs[tp] = dest
        return ErrorCode.REPLICA_NOT_AVAILABLE
    manager.preferred_dirs.pop(tp, None)  # hosted: its log exists
    if current_dir == dest or (move is not None and move.dest_dir == dest):
        return ErrorCode.NONE
    if manager.offline_dirs:  # Kafka makes no future log while a directory is offline
        return ErrorCode.KAFKA_STORAGE_ERROR
    move = manager.begin_move(topic, partition, dest)
    log.info("Moving %s-%d from %s to %s", topic, partition, current_dir, dest)
    broker.start_soon(partial(run_move, broker, move))
    return ErrorCode.NONE


def resume_moves(broker: Broker) -> None:
    """Run the moves a stop interrupted (found by the log manager at start-up)."""
    for move in list(broker.log_manager.moves.values()):
        broker.start_soon(partial(run_move, broker, move))


async def run_move(broker: Broker, move: LogMove) -> None:
    """Copy, then swap in, the future log of `move`, until done or cancelled (begun again
    with a new future log when the current log is truncated under the copy); a failure
    gives the move up (an I/O error takes its directory offline) and never ends the broker."""
    manager = broker.log_manager
    again: LogMove | None = move
    while again is not None:
        move = again
        try:
            again = await _copy_and_swap(broker, move)
        except (OSError, StorageError) as e:
            if move.cancelled:  # dropped while a worker wrote its future log: closed under it
                return
            log.error("The move of %s-%d to %s failed: %s", *move.tp, move.dest_dir, e)
            manager.drop_move(move)
            manager.handle_dir_error(move.dest_dir, e)
            return


async def _copy_and_swap(broker: Broker, move: LogMove) -> LogMove | None:
    """One future log's life: made, filled, swapped in (None) or voided by a truncation of
    the current log (the move begun again, to run next)."""
    manager = broker.log_manager
    future = move.future  # resumed after a restart: reopened by the log manager
    if future is None:
        future = await trio.to_thread.run_sync(
            move.make_future, manager.handles, broker.now_ms, broker.now_ms()
        )
        if not manager.future_made(move, future):
            return None
    max_bytes = broker.config.get_int("replica.fetch.max.bytes")
    quota = broker.replication_quotas.alter_log_dirs
    flushed = False
    while not move.cancelled:
        current = move.current
        if current.closed or current.offline:  # deleted, or its directory failed
            manager.drop_move(move)
            return None
        if move.restart_needed():
            return manager.begin_move(*move.tp, move.dest_dir)
        if move.caught_up:
            if not flushed:  # the copy is durable before the original goes
                flushed = True
                if (pending := future.begin_flush()) is not None:
                    await run_off_loop(pending)
                continue
            new = manager.replace_current_with_future(move)
            if new is None:
                await trio.sleep(RETRY_S)
                continue
            partition = broker.partition(*move.tp)
            if partition is not None and partition.log is current:
                partition.log = new
            await trio.to_thread.run_sync(fsync_dir, move.dest_dir)
            await write_checkpoints(broker)
            return None
        if (lookup := current.lookup_reads(move.read_from())) is not None:
            await read_ahead([lookup])  # an old segment's index and headers, off the loop
            if move.cancelled or current.closed or move.restart_needed():
                continue  # checked again above
        if quota.is_exceeded(broker.now_ms()):  # Kafka: no fetch, then its backoff
            await trio.sleep(broker.config.get_int("replica.fetch.backoff.ms") / 1000)
            continue
        result = move.next_read(max_bytes)
        if result is None:
            await trio.sleep(RETRY_S)
            continue
        try:
            data = await trio.to_thread.run_sync(_read_all, result.slices)
        finally:
            result.release()
        quota.record(len(data), broker.now_ms())
        if move.cancelled or move.restart_needed():
            continue
        try:
            append = future.begin_follower_append(data, write_behind=True)
        except UnexpectedAppendOffsetError:  # the current log changed under the copy
            return manager.begin_move(*move.tp, move.dest_dir)
        if append is not None:
            await run_off_loop(append)
    return None


def _valid_partition(topic: str, partition: int) -> bool:
    try:
        partition_dir_name(topic, partition)
    except ValueError:
        return False
    return True


def _read_all(slices: Sequence[FileSlice]) -> bytes:
    """The slices' bytes (in a worker thread)."""
    return b"".join(s.read() for s in slices)
