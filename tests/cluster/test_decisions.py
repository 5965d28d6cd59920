"""The controller's pure decisions, as tables (Kafka 3.9's algorithms)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from protocol.errors import ErrorCode, KafkaError
from wirebroker.controller import decisions as d
from wirebroker.controller.decisions import Election, ReplicaAssignment

NO_RACKS = {0: None, 1: None, 2: None, 3: None, 4: None}


def test_rack_unaware_assignment_matches_kafkas_fixed_start() -> None:
    # AdminUtils with fixedStartIndex 0 over brokers 0..4, 10 partitions, RF 3 (Kafka's own test)
    expected = {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }
    assert d.assign_replicas(NO_RACKS, 10, 3, start_index=0) == expected


def test_rack_unaware_assignment_spreads_leaders_and_replicas() -> None:
    out = d.assign_replicas(NO_RACKS, 50, 3, rng=random.Random(7))
    assert all(len(set(r)) == 3 for r in out.values())
    leaders = Counter(r[0] for r in out.values())
    assert set(leaders.values()) == {10}


def test_rack_aware_assignment_puts_replicas_in_distinct_racks() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assert d.rack_alternated(racks) == [0, 2, 4, 1, 3, 5]
    out = d.assign_replicas(racks, 12, 3, rng=random.Random(1))
    for replicas in out.values():
        assert len({racks[b] for b in replicas}) == 3
    fixed = d.assign_replicas(racks, 6, 3, start_index=0)
    assert fixed[0] == [0, 2, 4]


def test_rack_aware_with_fewer_racks_than_replicas() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    for replicas in d.assign_replicas(racks, 8, 3, rng=random.Random(3)).values():
        assert len(set(replicas)) == 3
        assert len({racks[b] for b in replicas}) == 2


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "code"),
    [
        ({0: None}, 1, 2, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({0: None}, 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({0: None}, 0, 1, ErrorCode.INVALID_PARTITIONS),
        ({0: "a", 1: None}, 1, 1, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_assignment_errors(
    brokers: dict[int, str | None], partitions: int, rf: int, code: ErrorCode
) -> None:
    with pytest.raises(KafkaError) as e:
        d.assign_replicas(brokers, partitions, rf)
    assert e.value.error_code == code


def test_assignment_for_new_partitions_continues_the_round_robin() -> None:
    out = d.assign_replicas(NO_RACKS, 2, 2, start_index=0, start_partition=3)
    assert sorted(out) == [3, 4]


@pytest.mark.parametrize(
    ("assignment", "ok"),
    [
        ({0: [1, 2]}, True),
        ({0: [1, 1]}, False),
        ({0: [1, 9]}, False),
        ({1: [1, 2]}, False),
        ({0: [1, 2], 1: [1]}, False),
    ],
)
def test_validate_assignment(assignment: dict[int, list[int]], ok: bool) -> None:
    if ok:
        d.validate_assignment(assignment, {1, 2, 3})
    else:
        with pytest.raises(KafkaError):
            d.validate_assignment(assignment, {1, 2, 3})


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "unclean", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], {2, 3}, False, Election(2, (2, 3))),
        ([1, 2, 3], [3, 2], {2, 3}, False, Election(2, (3, 2))),  # assignment order wins
        ([1, 2, 3], [1], {2, 3}, False, None),
        ([1, 2, 3], [1], {2, 3}, True, Election(2, (2,), unclean=True)),
        ([1, 2, 3], [1], set(), True, None),
        ([1, 2, 3], [1, 3], {1, 2, 3}, False, Election(1, (1, 3))),
    ],
)
def test_offline_election(
    replicas: list[int],
    isr: list[int],
    live: set[int],
    unclean: bool,
    expected: Election | None,
) -> None:
    assert d.offline_election(replicas, isr, live, unclean_allowed=unclean) == expected


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "expected"),
    [
        ([1, 2], [1, 2], {1, 2}, Election(1, (1, 2))),
        ([1, 2], [2], {1, 2}, None),
        ([1, 2], [1, 2], {2}, None),
    ],
)
def test_preferred_election(
    replicas: list[int], isr: list[int], live: set[int], expected: Election | None
) -> None:
    assert d.preferred_election(replicas, isr, live) == expected


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "shutting", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}, Election(2, (2, 3))),
        ([1, 2, 3], [1, 3], {1, 2, 3}, {1}, Election(3, (3,))),
        ([1, 2], [1], {1, 2}, {1}, None),
    ],
)
def test_controlled_shutdown_election(
    replicas: list[int],
    isr: list[int],
    live: set[int],
    shutting: set[int],
    expected: Election | None,
) -> None:
    assert d.controlled_shutdown_election(replicas, isr, live, shutting) == expected


@pytest.mark.parametrize(
    ("leader", "isr", "gone", "expected"),
    [
        (1, [1, 2, 3], 2, (1, (1, 3))),
        (1, [1, 2, 3], 1, (-1, (2, 3))),
        (1, [1], 1, (-1, (1,))),  # Kafka never empties the ISR
        (1, [1, 2], 3, (1, (1, 2))),
    ],
)
def test_shrink_isr(
    leader: int, isr: list[int], gone: int, expected: tuple[int, tuple[int, ...]]
) -> None:
    assert d.shrink_isr(leader, isr, gone) == expected


def test_reassignment_steps() -> None:
    current = ReplicaAssignment((1, 2, 3))
    moving = d.start_reassignment(current, [4, 2, 3])
    assert moving == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert moving.original == (2, 3, 1) and moving.target == (4, 2, 3)
    assert not d.reassignment_complete(moving, [1, 2, 3])
    assert d.reassignment_complete(moving, [1, 2, 3, 4])
    # a new target while moving starts again from the original replicas
    again = d.start_reassignment(moving, [5, 2, 3])
    assert again == ReplicaAssignment((5, 2, 3, 1), adding=(5,), removing=(1,))
    # the original replicas as target (or a cancel) end the move
    assert d.start_reassignment(moving, [2, 3, 1]) == ReplicaAssignment((2, 3, 1))
    assert d.cancel_reassignment(moving) == ReplicaAssignment((2, 3, 1))
    assert not d.reassignment_complete(ReplicaAssignment((1, 2)), [1, 2])


def test_offline_replicas_follow_the_leader_and_isr_answers() -> None:
    storage, none = ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE
    answer = {"a": storage, "b": none, "c": ErrorCode.STALE_CONTROLLER_EPOCH}
    assert d.offline_replicas(set(), answer) == {"a"}
    # An online answer brings a replica back; another error, or none at all, changes nothing.
    assert d.offline_replicas({"b", "c", "d"}, answer) == {"a", "c", "d"}
