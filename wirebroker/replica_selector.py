"""Which replica a consumer should fetch from (KIP-392's `replica.selector.class`).

Kafka loads the selector as a Java class; wirebroker knows the one Kafka ships,
RackAwareReplicaSelector, and refuses any other name at start (`check_replica_selector`). The
leader asks it for each partition of a v11+ consumer fetch that names its rack: the candidates
are Kafka's (findPreferredReadReplica) — the leader, and the followers in the ISR whose log
holds the fetch offset and that are alive with an endpoint on the client's listener — and the
choice is RackAwareReplicaSelector's: the leader when it is in the client's rack or none is,
else the same-rack follower with the highest log end offset (then the one caught up most
recently, then the highest id). This module only chooses; the fetch handler answers with it.
"""

from __future__ import annotations

from wirebroker.metadata_cache import MetadataCache
from wirebroker.partition import Partition

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
NO_PREFERRED_REPLICA = -1


def check_replica_selector(name: str) -> str | None:
    """Why `replica.selector.class` = `name` cannot start a broker, or None (empty: no
    selector, Kafka's default: consumers are never sent away from the leader)."""
    if not name or name == RACK_AWARE_SELECTOR:
        return None
    return (
        f"replica.selector.class={name} is not supported: wirebroker cannot load Java classes "
        f"and knows only {RACK_AWARE_SELECTOR}; set that, or leave it unset (consumers fetch "
        f"from the leader)"
    )


def preferred_read_replica(
    p: Partition,
    client_rack: str,
    fetch_offset: int,
    metadata: MetadataCache,
    listener: str,
    now_ms: int,
) -> int:
    """The follower a consumer in `client_rack` should fetch `p` from at `fetch_offset`, or
    NO_PREFERRED_REPLICA (the leader, this broker, serves it)."""
    leader = metadata.alive_broker(p.node_id)
    if leader is not None and leader.rack == client_rack:
        return NO_PREFERRED_REPLICA
    best: tuple[int, int, int] | None = None
    for replica_id, state in p.followers.items():
        if (
            replica_id not in p.isr
            or state.log_end_offset < fetch_offset
            or state.log_start_offset > fetch_offset
        ):
            continue
        broker = metadata.alive_broker(replica_id)
        if broker is None or broker.rack != client_rack or broker.endpoint(listener) is None:
            continue
        # Kafka's ReplicaView.comparator, as a key to maximize.
        key = (state.log_end_offset, state.last_caught_up_ms - now_ms, replica_id)
        if best is None or key > best:
            best = key
    return NO_PREFERRED_REPLICA if best is None else best[2]
