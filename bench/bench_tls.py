"""What TLS costs the broker per GiB: the connection transports alone, in one process.

    make bench-tls          (.venv/bin/python bench/bench_tls.py [--mib 512] [--repeats 3])

The broker's side of a connection runs in trio on the main thread; a client thread speaks to it
over loopback TCP, through Python's ssl for TLS. Two directions, each through `PlainTransport`
(the PLAINTEXT listener's) and `TlsTransport` (SSL's):

- receive: the client sends `--mib` MiB as 64 KiB frames (a producer's batches), each in
  `--segment`-byte writes, so in TLS records of that size (librdkafka writes each record of a
  batch on its own: 1 KiB records make 1 KiB TLS records); the broker reads them into a
  `FrameBuffer` and cuts the frames, as the connection loop does.
- send: the broker sends `--mib` MiB as responses of 1 MiB, each a small header and a file
  slice of a segment-like file (a fetch's answers: sendfile on PLAINTEXT, pread + encrypt on TLS).

The figure is the CPU seconds of the broker's thread per GiB (`time.thread_time`: the client
thread's work and time waiting for the GIL do not count), so it holds still on a busy machine;
medians of `--repeats`. A measuring tool for changes to `wirebroker/tls.py`, not a test.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.side_by_side.targets import Secured  # noqa: E402
from protocol.framing import NEED_DATA, FrameBuffer  # noqa: E402
from wirebroker.config import BrokerConfig  # noqa: E402
from wirebroker.tls import PrincipalMapper, TlsTransport, server_context  # noqa: E402
from wirebroker.transport import PlainTransport, Transport  # noqa: E402

MiB = 1 << 20
FRAME = 64 * 1024
RESPONSE = MiB


@dataclass
class Slice:
    """A file slice as storage hands them to the transports."""

    fd: int
    position: int
    length: int


def contexts(workdir: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The broker's context for an SSL listener (from `side_by_side`'s keystore, the one rows
    13-14 use), and a client's that trusts it."""
    secured = Secured.create(workdir)
    config = BrokerConfig.from_properties(secured.properties({"SSL": 0}))
    server, _ = server_context(config, "SSL")
    return server, ssl.create_default_context(cafile=str(secured.certificate))


def connected() -> tuple[socket.socket, socket.socket]:
    """(the broker's socket, the client's), over loopback TCP."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    server.setblocking(False)
    return server, client


async def receive(transport: Transport, total: int) -> None:
    frames = FrameBuffer()
    got = 0
    while got < total:
        try:
            n = transport.receive_into(frames.writable())
        except BlockingIOError:
            await trio.lowlevel.wait_readable(transport.fd)
            continue
        if not n:
            raise EOFError(f"closed after {got} of {total} bytes")
        frames.advance(n)
        while (frame := frames.next_frame()) is not NEED_DATA:
            assert isinstance(frame, memoryview)
            got += frame.nbytes + 4


async def send(transport: Transport, segment: int, total: int) -> None:
    header = bytes(64)
    for position in range(0, total, RESPONSE):
        await transport.send_frames([[header, Slice(segment, position, RESPONSE)]])


def run(
    kind: str, direction: str, total: int, workdir: Path, segment_file: int, segment: int
) -> float:
    """The broker thread's CPU seconds per GiB for one transfer."""
    server_context, client_context = contexts(workdir)
    tls = kind == "tls"
    server, raw_client = connected()
    client: socket.socket = raw_client
    done = threading.Event()
    errors: list[BaseException] = []

    def client_side() -> None:
        nonlocal client
        try:
            if tls:
                client = client_context.wrap_socket(raw_client, server_hostname="127.0.0.1")
            if direction == "receive":
                frame = memoryview(struct.pack(">i", FRAME - 4) + bytes(FRAME - 4))
                for _ in range(total // FRAME):
                    for i in range(0, FRAME, segment):
                        client.sendall(frame[i : i + segment])
            else:
                left = total + (total // RESPONSE) * (64 + 4)
                buffer = bytearray(MiB)
                while left > 0:
                    n = client.recv_into(buffer)
                    if not n:
                        raise EOFError("the broker closed")
                    left -= n
        except BaseException as e:
            errors.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=client_side)
    thread.start()

    async def broker_side() -> float:
        transport: Transport
        if tls:
            tls_transport = TlsTransport(server.fileno(), server_context)
            await tls_transport.handshake(30, PrincipalMapper(None))
            transport = tls_transport
        else:
            transport = PlainTransport(server)
        started = time.thread_time()
        if direction == "receive":
            await receive(transport, total)
        else:
            await send(transport, segment_file, total)
        cpu = time.thread_time() - started
        while not done.is_set():
            await trio.sleep(0.01)
        return cpu

    cpu = trio.run(broker_side)
    thread.join()
    server.close()
    client.close()
    if errors:
        raise errors[0]
    return cpu / (total / (1 << 30))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="MiB moved per run (default 512)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--segment", type=int, default=FRAME, help="receive: bytes per client write (64 KiB)"
    )
    args = parser.parse_args()
    total = args.mib * MiB
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        path = workdir / "segment"
        with open(path, "wb") as f:
            for _ in range(args.mib):
                f.write(os.urandom(MiB))
        segment_file = os.open(path, os.O_RDONLY)
        try:
            for direction in ("receive", "send"):
                for kind in ("plain", "tls"):
                    figures = [
                        run(kind, direction, total, workdir, segment_file, args.segment)
                        for _ in range(args.repeats)
                    ]
                    print(
                        f"{direction:7} {kind:5}: {statistics.median(figures):.3f} CPU s/GiB "
                        f"({', '.join(f'{f:.3f}' for f in figures)})",
                        flush=True,
                    )
        finally:
            os.close(segment_file)


if __name__ == "__main__":
    main()
