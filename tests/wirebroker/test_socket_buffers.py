"""Socket buffers as Kafka sets them: `socket.send.buffer.bytes` (SO_SNDBUF of an accepted
connection; -1 by default here, Kafka's 102400 when given) and `socket.receive.buffer.bytes` (SO_RCVBUF of the listening socket, which its
connections inherit) read on the broker's side of a real connection as the kernel reports them
(`ss`; Linux doubles what is set, for its own bookkeeping); -1 leaves the system's default and
its autotuning alone; a size that is not one is refused at start. The replica fetchers'
`replica.socket.receive.buffer.bytes` is set before the connection is made, and a follower's
connection to its leader has it (two broker processes); a fetch answer larger than the send
buffer arrives whole."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.cluster_harness import Cluster
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    decode_records,
    describe_configs,
    fetch_request,
    host_port,
    produce_request,
    wait_until,
)
from wirebroker.peer import PeerClient

#: What the kernel reports for a buffer set to `n` bytes (Linux doubles it).
KERNEL_FACTOR = 2


def established(*flags_and_filter: str) -> str:
    """`ss -tmnH` of the established TCP sockets matching the filter (with more flags first)."""
    flags = [f for f in flags_and_filter if f.startswith("-")]
    where = [f for f in flags_and_filter if not f.startswith("-")]
    return subprocess.run(
        ["ss", "-tmnH", *flags, "state", "established", *where],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout


def broker_side_buffers(broker_port: int, client: socket.socket) -> tuple[int, int]:
    """(SO_RCVBUF, SO_SNDBUF) of the broker's socket of `client`'s connection, from `ss`."""
    client_port = client.getsockname()[1]
    out = established(f"( sport = :{broker_port} )")
    # Each socket: its addresses' line, then its skmem line.
    entries = re.findall(r"\S+:(\d+)\s+\S+:(\d+)\s*\n?\s*skmem:\((.*?)\)", out)
    for _local, peer, skmem in entries:
        if int(peer) == client_port:
            fields = dict(re.findall(r"([a-z]+)(\d+)", skmem))
            return int(fields["rb"]), int(fields["tb"])
    raise AssertionError(f"no broker socket for port {client_port} in:\n{out}")


def answered(client: RawClient) -> None:
    """A request answered: the connection is accepted and served."""
    response = client.request(
        ApiVersionsRequest(client_software_name="test", client_software_version="1"), 3
    )
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.NONE


def os_default_buffers() -> tuple[int, int]:
    """(SO_RCVBUF, SO_SNDBUF) of a connection accepted here without setting either."""
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.create_connection(server.getsockname()) as client,
    ):
        accepted, _ = server.accept()
        with accepted:
            client.sendall(b"x")
            accepted.recv(1)
            return (
                accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            )


def test_accepted_connections_have_the_default_buffers(broker: BrokerProcess) -> None:
    """Kafka's receive buffer; the system's send buffer (wirebroker's default, -1)."""
    with RawClient(broker.bootstrap) as client:
        answered(client)
        received, sent = broker_side_buffers(broker.port, client.sock)
    assert received == KERNEL_FACTOR * 102400
    assert sent == os_default_buffers()[1]


@pytest.fixture
def kafkas_buffers_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with serving(BrokerProcess(tmp_path, {"socket.send.buffer.bytes": "102400"}), 40) as b:
        yield b


def test_a_send_buffer_given_is_set(kafkas_buffers_broker: BrokerProcess, topic: str) -> None:
    """Kafka's 100 KiB send buffer, when given: set, and a 1 MB fetch answer through it
    arrives whole (sent corked, in parts: the transport takes the cork off before each wait
    for the socket to drain)."""
    bootstrap = kafkas_buffers_broker.bootstrap
    with RawClient(bootstrap) as client:
        answered(client)
        _, sent = broker_side_buffers(kafkas_buffers_broker.port, client.sock)
    assert sent == KERNEL_FACTOR * 102400
    create_topic(bootstrap, topic)
    values = [os.urandom(250_000) for _ in range(4)]
    with RawClient(bootstrap) as client:
        for value in values:
            response = client.request(produce_request(topic, 0, [SimpleRecord(None, value)]), 9)
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        response = client.request(fetch_request(topic, offset=0), 12)
    records = response.responses[0].partitions[0].records
    assert [v for _, _, v in decode_records(records)] == values


def test_described_read_only_with_their_defaults(broker: BrokerProcess) -> None:
    """As Kafka 3.9 describes them: static keys (no dynamic update), Kafka's defaults but the
    send buffer's (-1 here)."""
    keys = {
        "socket.send.buffer.bytes": "-1",
        "socket.receive.buffer.bytes": "102400",
        "replica.socket.receive.buffer.bytes": "65536",
    }
    result = describe_configs(broker.bootstrap, 4, "0", list(keys))
    assert result.error_code == ErrorCode.NONE
    told = {c.name: c for c in result.configs}
    assert {name: c.value for name, c in told.items()} == keys
    assert all(c.read_only and c.config_source == 5 for c in told.values())  # DEFAULT_CONFIG


@pytest.fixture
def system_default_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    properties = {"socket.send.buffer.bytes": "-1", "socket.receive.buffer.bytes": "-1"}
    with serving(BrokerProcess(tmp_path, properties), 40) as b:
        yield b


def test_minus_one_leaves_the_systems_default(system_default_broker: BrokerProcess) -> None:
    with RawClient(system_default_broker.bootstrap) as client:
        answered(client)
        buffers = broker_side_buffers(system_default_broker.port, client.sock)
    assert buffers == os_default_buffers()
    assert KERNEL_FACTOR * 102400 not in buffers


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("socket.send.buffer.bytes", "0", "socket.send.buffer.bytes=0: give a buffer size"),
        ("socket.receive.buffer.bytes", "-2", "socket.receive.buffer.bytes=-2: give a buffer"),
        ("replica.socket.receive.buffer.bytes", "64k", "is not a whole number"),
    ],
)
def test_a_size_that_is_not_one_is_refused_at_start(
    tmp_path: Path, key: str, value: str, said: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wirebroker", "serve", "--listeners", "PLAINTEXT://127.0.0.1:0"]
        + ["--log-dirs", str(tmp_path), "--override", f"{key}={value}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert "ready" not in done.stderr


def test_a_fetcher_connection_has_its_receive_buffer_before_it_connects(
    broker: BrokerProcess,
) -> None:
    """`PeerClient(receive_buffer=...)`, as the replica fetchers make it: the buffer is on the
    socket, and requests are answered on it."""

    async def main() -> int:
        host, port = host_port(broker.bootstrap)
        peer = PeerClient("test", lambda: (host, port), client_id="fetcher", receive_buffer=65536)
        try:
            response = await peer.request(
                ApiVersionsRequest(client_software_name="test", client_software_version="1"), 3
            )
            assert response.error_code == ErrorCode.NONE
            connection = peer._connection
            assert connection is not None and connection._socket is not None
            return int(connection._socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
        finally:
            await peer.aclose()

    assert trio.run(main) == KERNEL_FACTOR * 65536


def test_a_followers_fetcher_connects_with_the_replica_receive_buffer(
    tmp_path: Path, topic: str
) -> None:
    """Two brokers: the follower's connection to its leader (its fetcher's only one there)
    has `replica.socket.receive.buffer.bytes`, as the kernel reports it."""
    cluster = Cluster(tmp_path, [1, 2], {"replica.socket.receive.buffer.bytes": "40000"})
    cluster.start()
    try:
        cluster.create_partition(topic, [1, 2])
        leader, follower = cluster.brokers[1], cluster.brokers[2]
        with RawClient(leader.bootstrap) as client:
            response = client.request(produce_request(topic, 0, [SimpleRecord(None, b"v")]), 9)
        # acks=all, answered once the follower fetched it: its fetcher is connected.
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert follower.proc is not None
        pid = follower.proc.pid

        def fetcher_buffers() -> list[int] | None:
            out = established("-p", f"( dport = :{leader.port} )")
            found = [
                int(rb)
                for owner, rb in re.findall(
                    r"users:\(\((.*?)\)\).*?skmem:\(r\d+,rb(\d+)", out, re.S
                )
                if f"pid={pid}," in owner
            ]
            return found or None

        assert wait_until(fetcher_buffers, what="the fetcher's socket") == [KERNEL_FACTOR * 40000]
    finally:
        problems = cluster.close()
    assert not problems, problems
