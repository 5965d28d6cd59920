"""The controller's decisions as pure functions: replica assignment, leader election, reassignment.

Nothing here reads ZooKeeper or sends a request; `controller.py` gathers the facts, calls these
and applies the result. Each follows Kafka 3.9's ZooKeeper-mode controller:

- assignment: AdminUtils' round robin with a random start and a shifting second replica, and its
  rack-alternating variant when every live broker has a rack;
- leader election (PartitionLeaderElectionAlgorithms): the first replica in assignment order
  that is live and in the ISR; unclean (`unclean.leader.election.enable`) falls back to the first
  live replica, alone in the ISR; preferred election only ever picks the first replica;
  controlled shutdown picks a live ISR member that is not shutting down;
- reassignment (KIP-455): replicas = target + original, adding = target - original, removing =
  original - target, finished once the whole target is in the ISR;
- offline replicas (a failed log directory): a broker's replicas that answer LeaderAndIsr with
  KAFKA_STORAGE_ERROR are offline until they answer NONE (or the broker restarts).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from protocol.errors import ErrorCode, KafkaError


# assignment -------------------------------------------------------------------------------
def _replica_index(first: int, shift: int, index: int, n: int) -> int:
    return (first + 1 + (shift + index) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    names = sorted(by_rack)
    iters = {r: iter(by_rack[r]) for r in names}
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        nxt = next(iters[names[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(names)
    return out


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = -1,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replicas for partitions `start_partition`.. of a topic over the live `brokers` (id -> rack).

    Rack-aware when every broker has a rack, rack-unaware when none has; a mix is an error, as
    in Kafka. `start_index` >= 0 fixes the otherwise random start (tests, CreatePartitions).
    """
    if partitions <= 0:
        raise KafkaError(
            "Number of partitions must be larger than 0.", error_code=ErrorCode.INVALID_PARTITIONS
        )
    if replication_factor <= 0:
        raise KafkaError(
            "Replication factor must be larger than 0.",
            error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    if replication_factor > len(brokers):
        raise KafkaError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
            error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    rng = rng or random.Random()
    racks = {b: r for b, r in brokers.items() if r is not None}
    if racks and len(racks) != len(brokers):
        raise KafkaError(
            "Not all brokers have rack information for replica rack aware assignment.",
            error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        )
    arranged = rack_alternated(racks) if racks else sorted(brokers)
    n = len(arranged)
    n_racks = len(set(racks.values())) if racks else 0
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    pid = max(0, start_partition)
    for _ in range(partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [arranged[first]]
        if not racks:
            replicas += [
                arranged[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
        else:
            used_racks = {racks[arranged[first]]}
            used = {arranged[first]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    b = arranged[_replica_index(first, shift * n_racks, k, n)]
                    k += 1
                    if (racks[b] not in used_racks or len(used_racks) == n_racks) and (
                        b not in used or len(used) == n
                    ):
                        replicas.append(b)
                        used_racks.add(racks[b])
                        used.add(b)
                        break
        out[pid] = replicas
        pid += 1
    return out


def validate_assignment(
    assignment: Mapping[int, Sequence[int]], live: Collection[int], *, first_partition: int = 0
) -> None:
    """A manual assignment: partitions first..n-1, same size everywhere, live and distinct brokers."""
    if not assignment:
        raise KafkaError(
            "replica assignment is empty", error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT
        )
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise KafkaError(
            f"partitions of a replica assignment must be consecutive from {first_partition}",
            error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        )
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise KafkaError(
            "every partition needs the same, non-zero number of replicas",
            error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        )
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise KafkaError(
                f"duplicate brokers in the replicas {list(replicas)} of partition {p}",
                error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise KafkaError(
                f"unknown or offline brokers {unknown} in the replicas of partition {p}",
                error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )


# leader election --------------------------------------------------------------------------
@dataclass(frozen=True)
class Election:
    """A decided leader and the ISR that goes with it; `unclean` when the leader was not in the ISR."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


def offline_election(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean_allowed: bool
) -> Election | None:
    """A leader for a partition whose leader is gone (or that has none yet)."""
    for b in replicas:
        if b in live and b in isr:
            return Election(b, tuple(i for i in isr if i in live))
    if unclean_allowed:
        for b in replicas:
            if b in live:
                return Election(b, (b,), unclean=True)
    return None


def initial_election(replicas: Sequence[int], live: Collection[int]) -> Election | None:
    """A new partition: the first live replica leads, every live replica is in the ISR."""
    alive = tuple(b for b in replicas if b in live)
    return Election(alive[0], alive) if alive else None


def preferred_election(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Election | None:
    """The preferred (first) replica, only when it is live and in the ISR."""
    if replicas and replicas[0] in live and replicas[0] in isr:
        return Election(replicas[0], tuple(isr))
    return None


def reassignment_election(
    target: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Election | None:
    """A leader among the target replicas of a finishing reassignment."""
    for b in target:
        if b in live and b in isr:
            return Election(b, tuple(isr))
    return None


def controlled_shutdown_election(
    replicas: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> Election | None:
    """A leader that is live, in the ISR and not shutting down; the ISR loses the leavers."""
    new_isr = tuple(b for b in isr if b not in shutting_down)
    for b in replicas:
        if b in live and b in isr and b not in shutting_down:
            return Election(b, new_isr)
    return None


def shrink_isr(leader: int, isr: Sequence[int], gone: int) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) after replica `gone` went offline; the leader becomes -1 if it was the one.

    Kafka never empties the ISR: a leader that was the last ISR member stays in it.
    """
    new_isr = tuple(b for b in isr if b != gone)
    new_leader = -1 if leader == gone else leader
    if not new_isr:
        new_isr = tuple(isr)
    return new_leader, new_isr


# offline replicas -------------------------------------------------------------------------
P = TypeVar("P", bound=Hashable)


def offline_replicas(offline: Collection[P], errors: Mapping[P, int]) -> set[P]:
    """A broker's replicas in an offline log directory after its LeaderAndIsr answer (`errors`
    per partition), given those `offline` before (Kafka's LeaderAndIsrResponseReceived)."""
    return {p for p in offline if errors.get(p) != ErrorCode.NONE} | {
        p for p, code in errors.items() if code == ErrorCode.KAFKA_STORAGE_ERROR
    }


# reassignment -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas, with the ones being added and removed by a reassignment."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.removing)


def start_reassignment(current: ReplicaAssignment, target: Sequence[int]) -> ReplicaAssignment:
    """The assignment while moving to `target`: RS = target + original, AR, RR (KIP-455).

    Reassigning a partition that is already moving starts from its original replicas;
    a target equal to the original replicas cancels the move.
    """
    original = current.original
    replicas = tuple(target) + tuple(b for b in original if b not in target)
    adding = tuple(b for b in target if b not in original)
    removing = tuple(b for b in original if b not in target)
    if not adding and not removing:
        return ReplicaAssignment(tuple(target))
    return ReplicaAssignment(replicas, adding, removing)


def cancel_reassignment(current: ReplicaAssignment) -> ReplicaAssignment:
    """Back to the original replicas (the adding ones are dropped)."""
    return ReplicaAssignment(current.original)


def reassignment_complete(current: ReplicaAssignment, isr: Collection[int]) -> bool:
    """A move may finish once every target replica is in the ISR."""
    return current.reassigning and all(b in isr for b in current.target)
