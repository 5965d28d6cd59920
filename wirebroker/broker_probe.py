"""Asking a running broker, Kafka's or ours, whether it serves clients yet: blocking ApiVersions
and Metadata round trips over a plain socket, for launchers that wait for a broker they started
(`wirebroker.testcontainers`' containers, the compat suite's Kafka processes).

A broker that listens is not yet one clients can use: Kafka 3.9 in ZooKeeper mode logs
"[KafkaServer id=N] started" before its controller's UpdateMetadata reached it, and until then
its Metadata lists no broker (CreateTopics fails: "Replication factor: 1 larger than available
brokers: 0"). `broker_listed` is the check that covers that moment: Metadata lists the broker
and names a controller.
"""

from __future__ import annotations

import socket
import struct

_CLIENT_ID = b"wirebroker-probe"


def _round_trip(
    sock: socket.socket, api_key: int, api_version: int, correlation_id: int, body: bytes
) -> bytes:
    """Send one request with a v1 request header; return the response minus its header."""
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(_CLIENT_ID))
    frame = header + _CLIENT_ID + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    payload = recv_exact(sock, size)
    (got_correlation,) = struct.unpack_from(">i", payload, 0)
    if got_correlation != correlation_id:
        raise ValueError(f"correlation id {got_correlation} != {correlation_id}")
    return payload[4:]


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
        body = _round_trip(s, 18, 0, 1, b"")
    (error_code, count) = struct.unpack_from(">hi", body, 0)
    if error_code != 0:
        raise ValueError(f"ApiVersions error_code {error_code}")
    out: dict[int, tuple[int, int]] = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", body, 6 + 6 * i)
        out[key] = (lo, hi)
    return out


def metadata_brokers(
    host: str, port: int, timeout: float = 5.0
) -> tuple[dict[int, tuple[str, int]], int]:
    """Metadata v1 round trip asking for no topics: ``({node_id: (host, port)}, controller_id)``."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        body = _round_trip(s, 3, 1, 2, struct.pack(">i", 0))
    pos = 0
    (count,) = struct.unpack_from(">i", body, pos)
    pos += 4
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", body, pos)
        pos += 6
        b_host = body[pos : pos + host_len].decode()
        pos += host_len
        (b_port, rack_len) = struct.unpack_from(">ih", body, pos)
        pos += 6 + max(rack_len, 0)
        brokers[node_id] = (b_host, b_port)
    (controller_id,) = struct.unpack_from(">i", body, pos)
    return brokers, controller_id


def broker_listed(host: str, port: int, broker_id: int | None = None) -> bool:
    """Whether the broker at `host`:`port` answers Metadata listing broker `broker_id` (None:
    the broker advertised as `host`:`port`, whatever its id) and a controller; False while it
    does not answer."""
    try:
        brokers, controller_id = metadata_brokers(host, port)
    except (OSError, ValueError, struct.error):
        return False
    listed = broker_id in brokers if broker_id is not None else (host, port) in brokers.values()
    return listed and controller_id >= 0
