"""Group coordinator benchmark: join latency of a 10-member group, offset commit round trip.

    .venv/bin/python bench/bench_groups.py [--members 10] [--delay-ms 3000] [--commits 2000]

Starts a real broker process and speaks the wire protocol directly (our codec over blocking
sockets, one thread per member), so the figures are the broker's, not a client library's:

- join: every member sends JoinGroup v9 (MEMBER_ID_REQUIRED round trip first, as KIP-394
  clients do) at once; the figure is from the first JoinGroup with a member id to the last
  JoinGroup response, against the target of one `group.initial.rebalance.delay.ms` + 100 ms.
  SyncGroup of the whole group is timed too.
- commit: OffsetCommit v9 of one partition by a member of a Stable group, sent and answered one
  at a time; median and p99 against the 2 ms target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from protocol.errors import ErrorCode  # noqa: E402
from protocol.messages.find_coordinator import FindCoordinatorRequest  # noqa: E402
from protocol.messages.join_group import JoinGroupRequest  # noqa: E402
from protocol.messages.offset_commit import OffsetCommitRequest  # noqa: E402
from protocol.messages.sync_group import SyncGroupRequest  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.wirebroker.helpers import RawClient, create_topic, find_coordinator  # noqa: E402

GROUP = "bench-group"
TOPIC = "bench-topic"


def join_request(member_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


def run_join(bootstrap: str, members: int) -> tuple[float, float, list[tuple[RawClient, str, int]]]:
    clients = [RawClient(bootstrap, client_id=f"m{i}", timeout=60) for i in range(members)]
    ids = []
    for c in clients:
        r = c.request(join_request(""), 9)
        assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED, r
        ids.append(r.member_id)
    results: list[tuple[float, int, str]] = [(0.0, 0, "")] * members
    barrier = threading.Barrier(members + 1)

    def member(i: int) -> None:
        barrier.wait()
        r = clients[i].request(join_request(ids[i]), 9)
        assert r.error_code == ErrorCode.NONE, r
        results[i] = (time.perf_counter(), r.generation_id, r.leader)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    join_s = max(done for done, _, _ in results) - start
    generation, leader = results[0][1], results[0][2]

    sync_done: list[float] = [0.0] * members

    def sync(i: int) -> None:
        assignments = []
        if ids[i] == leader:
            assignments = [
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=b"")
                for m in ids
            ]
        r = clients[i].request(
            SyncGroupRequest(
                group_id=GROUP, generation_id=generation, member_id=ids[i], assignments=assignments
            ),
            5,
        )
        assert r.error_code == ErrorCode.NONE, r
        sync_done[i] = time.perf_counter()

    sync_start = time.perf_counter()
    threads = [threading.Thread(target=sync, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sync_s = max(sync_done) - sync_start
    return join_s, sync_s, [(c, m, generation) for c, m in zip(clients, ids, strict=True)]


def run_commits(client: RawClient, member_id: str, generation: int, count: int) -> list[float]:
    times = []
    for i in range(count):
        request = OffsetCommitRequest(
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=i, committed_metadata=""
                        )
                    ],
                )
            ],
        )
        start = time.perf_counter()
        r = client.request(request, 9)
        times.append(time.perf_counter() - start)
        assert r.topics[0].partitions[0].error_code == ErrorCode.NONE, r
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--delay-ms", type=int, default=3000)
    parser.add_argument("--commits", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), {"group.initial.rebalance.delay.ms": str(args.delay_ms)})
        broker.start()
        try:
            create_topic(broker.bootstrap, TOPIC, 1)
            with RawClient(broker.bootstrap) as c:
                t = time.perf_counter()
                find_coordinator(c, FindCoordinatorRequest(key=GROUP, key_type=0), 3)
                create_s = time.perf_counter() - t
            print(
                "FindCoordinator until found (creates __consumer_offsets, 50 partitions): "
                f"{create_s * 1000:.0f} ms"
            )
            join_s, sync_s, members = run_join(broker.bootstrap, args.members)
            target = args.delay_ms / 1000 + 0.1
            verdict = "ok" if join_s <= target else "OVER"
            print(
                f"join of {args.members} members: {join_s * 1000:.0f} ms "
                f"(target {target * 1000:.0f} ms: {verdict}); sync: {sync_s * 1000:.1f} ms"
            )
            client, member_id, generation = members[0]
            run_commits(client, member_id, generation, 200)  # warm up
            times = sorted(run_commits(client, member_id, generation, args.commits))
            median = statistics.median(times) * 1000
            p99 = times[int(len(times) * 0.99)] * 1000
            verdict = "ok" if median <= 2.0 else "OVER"
            print(
                f"offset commit round trip ({args.commits}): median {median:.2f} ms, "
                f"p99 {p99:.2f} ms (target 2 ms: {verdict})"
            )
            for c, _, _ in members:
                c.close()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
