"""Asking a running broker, Kafka's or ours, whether it serves clients yet: blocking ApiVersions
and Metadata round trips over a plain socket, for launchers that wait for a broker they started
(`wirebroker.testcontainers`' containers, the compat suite's Kafka processes).

The requests and answers are the generated codec's (`protocol.api`). A broker that listens is
not yet one clients can use: Kafka 3.9 in ZooKeeper mode logs "[KafkaServer id=N] started"
before its controller's UpdateMetadata reached it, and until then its Metadata lists no broker
(CreateTopics fails: "Replication factor: 1 larger than available brokers: 0"). `broker_listed`
is the check that covers that moment: Metadata lists the broker and names a controller.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol.api import decode_response, encode_request
from protocol.errors import ProtocolError
from protocol.framing import frame
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.headers import RequestHeader
from protocol.messages.metadata import MetadataRequest
from protocol.schema import Message

_CLIENT_ID = "wirebroker-probe"


def _round_trip(sock: socket.socket, body: Message, version: int) -> Any:
    """Send `body` at `version` (correlation id 1) and return the response body."""
    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=1,
        client_id=_CLIENT_ID,
    )
    sock.sendall(frame(encode_request(header, body)))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    response = decode_response(recv_exact(sock, size), body.API_KEY, version)
    if response.header.correlation_id != 1:
        raise ValueError(f"correlation id {response.header.correlation_id} != 1")
    return response.body


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock`; ConnectionError if the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def api_versions(host: str, port: int, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 round trip: ``{api_key: (min_version, max_version)}``."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        body = _round_trip(s, ApiVersionsRequest(), 0)
    if body.error_code != 0:
        raise ValueError(f"ApiVersions error_code {body.error_code}")
    return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}


def metadata_brokers(
    host: str, port: int, timeout: float = 5.0
) -> tuple[dict[int, tuple[str, int]], int]:
    """Metadata v1 round trip asking for no topics: ``({node_id: (host, port)}, controller_id)``."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        body = _round_trip(s, MetadataRequest(topics=[]), 1)
    return {b.node_id: (b.host, b.port) for b in body.brokers}, body.controller_id


def broker_listed(host: str, port: int, broker_id: int | None = None) -> bool:
    """Whether the broker at `host`:`port` answers Metadata listing broker `broker_id` (None:
    the broker advertised as `host`:`port`, whatever its id) and a controller; False while it
    does not answer."""
    try:
        brokers, controller_id = metadata_brokers(host, port)
    except (OSError, ValueError, struct.error, ProtocolError):
        return False
    listed = broker_id in brokers if broker_id is not None else (host, port) in brokers.values()
    return listed and controller_id >= 0
