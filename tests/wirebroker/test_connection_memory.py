"""A burst of connections costs the broker little memory, and it gives that memory back.

Each connection's receive buffer starts small and grows only with the frames it receives, so
2,000 clients that each send an ApiVersions request must not take the broker's resident memory
(`VmHWM`, its peak) past 200 MiB, and once they close, its `VmRSS` returns near where it was.
"""

from __future__ import annotations

import resource
import socket
import struct
from collections.abc import Iterator

import pytest

from protocol.messages.api_versions import ApiVersionsRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import host_port, request_frame, wait_until

pytestmark = pytest.mark.integration

CONNECTIONS = 2000
PEAK_MIB = 200
# What the broker may keep after the burst, over its idle resident memory: about 20 MiB stays in
# Python's allocator (reused by the next burst, not grown by it).
SETTLED_MIB = 32


@pytest.fixture(autouse=True)
def enough_descriptors() -> Iterator[None]:
    """Room for the test's sockets (the broker inherits the limit, and needs as many)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = CONNECTIONS + 512
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below {needed}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def burst_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"))
    process.start()
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, "\n".join(process.log[-60:])
    assert not process.tracebacks(), "\n".join(process.log)


def _status_mib(pid: int, field: str) -> float:
    """`VmRSS` or `VmHWM` of a process, in MiB, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _receive_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data[4:]


def test_a_burst_of_connections_costs_little_and_is_given_back(
    burst_broker: BrokerProcess,
) -> None:
    assert burst_broker.proc is not None
    pid = burst_broker.proc.pid
    request = request_frame(ApiVersionsRequest(), 0, 1)
    address = host_port(burst_broker.bootstrap)
    # One connection first, so the idle level includes what the first request loads.
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request)
        _receive_frame(sock)
    idle = _status_mib(pid, "VmRSS")

    sockets: list[socket.socket] = []
    try:
        for _ in range(CONNECTIONS):
            sock = socket.create_connection(address, timeout=10)
            sockets.append(sock)
            sock.sendall(request)
        for sock in sockets:
            assert _receive_frame(sock)
        peak = _status_mib(pid, "VmHWM")
    finally:
        for sock in sockets:
            sock.close()
    assert peak < PEAK_MIB, f"peak {peak:.0f} MiB (idle {idle:.0f} MiB)"
    wait_until(
        lambda: _status_mib(pid, "VmRSS") < idle + SETTLED_MIB,
        timeout=20,
        what=f"the broker's RSS back within {SETTLED_MIB} MiB of {idle:.0f} MiB",
    )
