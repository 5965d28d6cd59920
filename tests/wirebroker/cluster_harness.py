"""A test cluster: broker processes driven by the test, which plays the controller over TCP.

Until the ZooKeeper controller exists, `Cluster` does what it will do, through the same wire
requests: it sends LeaderAndIsr v7, UpdateMetadata v8 and StopReplica v4 to the brokers (started
with `wirebroker.external.controller=true`, so they wait for them), and `FakeController` listens
as the controller node named in UpdateMetadata and answers the AlterPartition requests leaders
send, checking leader and partition epochs as Kafka's controller does. Tests await what it
records (`wait_for_isr`) instead of sleeping.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.api import decode_request, encode_response
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from protocol.messages.headers import ResponseHeader
from protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient

CONTROLLER_ID = 100
LEADER_AND_ISR_VERSION, UPDATE_METADATA_VERSION, STOP_REPLICA_VERSION = 7, 8, 4


@dataclass
class PartitionState:
    topic: str
    topic_id: uuid.UUID
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    partition_epoch: int = 0


@dataclass
class FakeController:
    """Answers AlterPartition v0-v3 on a real socket, as the controller node would."""

    node_id: int = CONTROLLER_ID
    partitions: dict[tuple[uuid.UUID, int], PartitionState] = field(default_factory=dict)
    #: (broker id, topic id, partition, proposed ISR, answer code), in arrival order.
    requests: list[tuple[int, uuid.UUID, int, list[int], int]] = field(default_factory=list)
    #: When set, every AlterPartition is answered with this top-level error.
    refuse_with: ErrorCode | None = None

    def __post_init__(self) -> None:
        self.cond = threading.Condition()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._closed = False
        self._conns: list[socket.socket] = []
        self.errors: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self.server.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = bytearray()
        try:
            while True:
                while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                size = struct.unpack_from(">i", buf)[0]
                data, buf = bytes(buf[4 : 4 + size]), buf[4 + size :]
                request = decode_request(data)
                if not isinstance(request.body, AlterPartitionRequest):
                    # A client that found this node in Metadata (librdkafka connects to every
                    # broker it is told of): not a broker, so hang up, as on a dead one.
                    return
                response = self.alter_partition(request.body, request.header.request_api_version)
                payload = encode_response(
                    ResponseHeader(correlation_id=request.header.correlation_id),
                    response,
                    request.header.request_api_key,
                    request.header.request_api_version,
                )
                conn.sendall(frame(payload))
        except OSError:
            return
        except Exception as e:  # reported by Cluster.close, so the test fails with it
            self.errors.append(f"fake controller: {e!r}")
        finally:
            conn.close()

    def alter_partition(
        self, request: AlterPartitionRequest, version: int
    ) -> AlterPartitionResponse:
        with self.cond:
            if self.refuse_with is not None:
                return AlterPartitionResponse(error_code=self.refuse_with)
            topics = []
            for t in request.topics:
                results = []
                for p in t.partitions:
                    isr = (
                        [b.broker_id for b in p.new_isr_with_epochs]
                        if version >= 3
                        else list(p.new_isr)
                    )
                    state = self.partitions.get((t.topic_id, p.partition_index))
                    r = AlterPartitionResponse.PartitionData(partition_index=p.partition_index)
                    if state is None:
                        r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif p.leader_epoch != state.leader_epoch or request.broker_id != state.leader:
                        r.error_code = ErrorCode.FENCED_LEADER_EPOCH
                    elif p.partition_epoch != state.partition_epoch:
                        r.error_code = ErrorCode.INVALID_UPDATE_VERSION
                    else:
                        state.isr = isr
                        state.partition_epoch += 1
                        r.leader_id = state.leader
                        r.leader_epoch = state.leader_epoch
                        r.isr = list(isr)
                        r.partition_epoch = state.partition_epoch
                    self.requests.append(
                        (request.broker_id, t.topic_id, p.partition_index, isr, r.error_code)
                    )
                    results.append(r)
                topics.append(
                    AlterPartitionResponse.TopicData(topic_id=t.topic_id, partitions=results)
                )
            self.cond.notify_all()
            return AlterPartitionResponse(error_code=ErrorCode.NONE, topics=topics)

    def isr(self, topic_id: uuid.UUID, partition: int = 0) -> list[int]:
        with self.cond:
            return list(self.partitions[(topic_id, partition)].isr)

    def wait_for_isr(
        self, topic_id: uuid.UUID, isr: list[int], partition: int = 0, timeout: float = 30.0
    ) -> PartitionState:
        """Wait until an accepted AlterPartition set this ISR (in any order)."""
        with self.cond:
            ok = self.cond.wait_for(
                lambda: sorted(self.partitions[(topic_id, partition)].isr) == sorted(isr), timeout
            )
            state = self.partitions[(topic_id, partition)]
            assert ok, f"ISR is {state.isr}, not {isr}; AlterPartition requests: {self.requests}"
            return state


class Cluster:
    """Broker processes 1..n plus the fake controller; the test sends the controller's requests."""

    def __init__(
        self, root: Path, broker_ids: list[int], properties: dict[str, str] | None = None
    ) -> None:
        self.controller = FakeController()
        self.controller_epoch = 1
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in broker_ids:
            props = {
                "broker.id": str(broker_id),
                "wirebroker.external.controller": "true",
                **(properties or {}),
            }
            self.brokers[broker_id] = BrokerProcess(root / f"broker-{broker_id}", props)
        self.stopped: set[int] = set()
        self.retired: list[FakeController] = []

    def start(self) -> None:
        """Start every broker at once (each waits for its own "ready" line)."""
        errors: list[BaseException] = []

        def start(b: BrokerProcess) -> None:
            try:
                b.start()
            except BaseException as e:  # reported below, in the test's thread
                errors.append(e)

        threads = [threading.Thread(target=start, args=(b,)) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def close(self) -> list[str]:
        """Stop everything; returns problems (tracebacks, unclean exits) for the test to assert."""
        problems = []
        for broker_id in list(self.stopped):
            self.resume(broker_id)
        for broker_id, b in self.brokers.items():
            if b.proc is None:
                continue
            alive = b.alive()
            code = b.stop()
            if not alive or code != 0:
                problems.append(f"broker {broker_id} exited with {code}")
            problems += [f"broker {broker_id}: {line}" for line in b.tracebacks()]
        for controller in [self.controller, *self.retired]:
            controller.close()
            problems += controller.errors
        return problems

    # signals ------------------------------------------------------------------------------
    def pause(self, broker_id: int) -> None:
        proc = self.brokers[broker_id].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        self.stopped.add(broker_id)

    def resume(self, broker_id: int) -> None:
        proc = self.brokers[broker_id].proc
        if proc is not None:
            proc.send_signal(signal.SIGCONT)
        self.stopped.discard(broker_id)

    # the controller's requests -------------------------------------------------------------
    def request(self, broker_id: int, body: Any, version: int) -> Any:
        with RawClient(
            self.brokers[broker_id].bootstrap, client_id=f"controller-{self.controller.node_id}"
        ) as c:
            return c.request(body, version)

    def live_brokers(
        self, exclude: set[int] | None = None
    ) -> list[UpdateMetadataRequest.UpdateMetadataBroker]:
        exclude = exclude or set()
        out = []
        for broker_id, b in sorted(self.brokers.items()):
            if broker_id in exclude or b.proc is None:
                continue
            out.append(update_metadata_broker(broker_id, "127.0.0.1", b.port))
        out.append(
            update_metadata_broker(self.controller.node_id, "127.0.0.1", self.controller.port)
        )
        return out

    def update_metadata(
        self,
        states: list[PartitionState],
        to: list[int] | None = None,
        exclude: set[int] | None = None,
    ) -> dict[int, UpdateMetadataResponse]:
        exclude = exclude or set()
        request = update_metadata_request(
            states, self.controller.node_id, self.controller_epoch, self.live_brokers(exclude)
        )
        targets = (
            to
            if to is not None
            else [i for i, b in self.brokers.items() if i not in exclude and b.proc is not None]
        )
        return {i: self.request(i, request, UPDATE_METADATA_VERSION) for i in targets}

    def leader_and_isr(
        self, broker_id: int, states: list[PartitionState], controller_epoch: int | None = None
    ) -> LeaderAndIsrResponse:
        epoch = self.controller_epoch if controller_epoch is None else controller_epoch
        leaders = {s.leader for s in states}
        live_leaders = {i: b.port for i, b in self.brokers.items() if i in leaders}
        request = leader_and_isr_request(states, self.controller.node_id, epoch, live_leaders)
        return self.request(broker_id, request, LEADER_AND_ISR_VERSION)

    def stop_replica(
        self, broker_id: int, topic: str, partition: int, leader_epoch: int, delete: bool
    ) -> StopReplicaResponse:
        request = StopReplicaRequest(
            controller_id=self.controller.node_id,
            controller_epoch=self.controller_epoch,
            topic_states=[
                StopReplicaRequest.StopReplicaTopicState(
                    topic_name=topic,
                    partition_states=[
                        StopReplicaRequest.StopReplicaPartitionState(
                            partition_index=partition,
                            leader_epoch=leader_epoch,
                            delete_partition=delete,
                        )
                    ],
                )
            ],
        )
        return self.request(broker_id, request, STOP_REPLICA_VERSION)

    def elect(self, state: PartitionState, to: list[int] | None = None) -> None:
        """Record `state` as the controller's and tell the replicas (LeaderAndIsr) and every
        broker (UpdateMetadata), as Kafka's controller does after a decision."""
        with self.controller.cond:
            self.controller.partitions[(state.topic_id, state.partition)] = state
        for broker_id in to if to is not None else state.replicas:
            if broker_id in self.stopped or self.brokers[broker_id].proc is None:
                continue
            response = self.leader_and_isr(broker_id, [state])
            assert response.error_code == ErrorCode.NONE, response
            for t in response.topics:
                for p in t.partition_errors:
                    assert p.error_code == ErrorCode.NONE, (broker_id, p)
        self.update_metadata([state], exclude=self.stopped)

    def create_partition(
        self,
        topic: str,
        replicas: list[int],
        leader: int | None = None,
        isr: list[int] | None = None,
    ) -> PartitionState:
        state = PartitionState(
            topic,
            uuid.uuid4(),
            0,
            replicas[0] if leader is None else leader,
            0,
            list(replicas if isr is None else isr),
            list(replicas),
        )
        self.update_metadata([])  # brokers learn each other (and the controller) first
        self.elect(state)
        return state

    def move_controller(self) -> FakeController:
        """A new controller (the next node id, the next controller epoch) takes over the
        partition states; the old one answers NOT_CONTROLLER from now on. Every broker learns
        of it from UpdateMetadata, as after a ZooKeeper election."""
        old = self.controller
        new = FakeController(node_id=old.node_id + 1)
        with old.cond:
            old.refuse_with = ErrorCode.NOT_CONTROLLER
            new.partitions = old.partitions
        self.retired.append(old)
        self.controller = new
        self.controller_epoch += 1
        self.update_metadata(list(new.partitions.values()), exclude=self.stopped)
        return new

    def segment_bytes(self, broker_id: int, topic: str, partition: int = 0) -> bytes:
        """The concatenated .log files of a partition on one broker's disk."""
        d = self.brokers[broker_id].data_dir / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.brokers.values())


def update_metadata_broker(
    broker_id: int, host: str, port: int
) -> UpdateMetadataRequest.UpdateMetadataBroker:
    return UpdateMetadataRequest.UpdateMetadataBroker(
        id=broker_id,
        endpoints=[
            UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=port, host=host, listener="PLAINTEXT", security_protocol=0
            )
        ],
        rack=None,
    )


def _by_topic(states: list[PartitionState]) -> dict[tuple[str, uuid.UUID], list[PartitionState]]:
    """`states` grouped by topic (name, id), in order."""
    topics: dict[tuple[str, uuid.UUID], list[PartitionState]] = {}
    for s in states:
        topics.setdefault((s.topic, s.topic_id), []).append(s)
    return topics


def update_metadata_request(
    states: list[PartitionState],
    controller_id: int,
    controller_epoch: int,
    live_brokers: list[UpdateMetadataRequest.UpdateMetadataBroker],
) -> UpdateMetadataRequest:
    """UpdateMetadata (v8's fields) of `states` and `live_brokers`."""
    return UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        topic_states=[
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=name,
                topic_id=tid,
                partition_states=[
                    UpdateMetadataRequest.UpdateMetadataPartitionState(
                        partition_index=s.partition,
                        controller_epoch=controller_epoch,
                        leader=s.leader,
                        leader_epoch=s.leader_epoch,
                        isr=list(s.isr),
                        zk_version=s.partition_epoch,
                        replicas=list(s.replicas),
                    )
                    for s in ps
                ],
            )
            for (name, tid), ps in _by_topic(states).items()
        ],
        live_brokers=live_brokers,
    )


def leader_and_isr_request(
    states: list[PartitionState],
    controller_id: int,
    controller_epoch: int,
    live_leaders: dict[int, int],
) -> LeaderAndIsrRequest:
    """LeaderAndIsr (v7's fields) of `states`; `live_leaders`: broker id -> port (127.0.0.1)."""
    return LeaderAndIsrRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        type=0,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name=name,
                topic_id=tid,
                partition_states=[
                    LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                        partition_index=s.partition,
                        controller_epoch=controller_epoch,
                        leader=s.leader,
                        leader_epoch=s.leader_epoch,
                        isr=list(s.isr),
                        partition_epoch=s.partition_epoch,
                        replicas=list(s.replicas),
                    )
                    for s in ps
                ],
            )
            for (name, tid), ps in _by_topic(states).items()
        ],
        live_leaders=[
            LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                broker_id=i, host_name="127.0.0.1", port=port
            )
            for i, port in sorted(live_leaders.items())
        ],
    )
