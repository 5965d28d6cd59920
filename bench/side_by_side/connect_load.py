"""Row 14's load generator: SASL_SSL connections set up, one after another, for a while.

``python -m bench.side_by_side.connect_load --bootstrap HOST:PORT --cafile CERT --seconds S``
opens a TCP connection, does the TLS handshake (no session resumption), then what a Kafka
client does before its first real request: ApiVersions v3, SaslHandshake v1 and SaslAuthenticate
v2 with SASL/PLAIN; then it closes the connection and starts the next. It prints one JSON line,
``{"connections": N, "seconds": S}``. The harness runs several at once (``connections_per_s``),
each in its own process, and adds up their rates. Requests are framed with this project's
codec; any error answer stops the run.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import subprocess
import sys
import time
from typing import Any

from bench.side_by_side.rdkafka_load import REPO_ROOT, _env
from protocol.api import decode_response, encode_request
from protocol.framing import frame
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.headers import RequestHeader
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from protocol.schema import Message
from wirebroker.broker_probe import recv_exact

MODULE = "bench.side_by_side.connect_load"
_SIZE = struct.Struct(">i")


def _request(sock: ssl.SSLSocket, body: Message, version: int) -> Any:
    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=1,
        client_id="bench-connect",
    )
    sock.sendall(frame(encode_request(header, body)))
    (size,) = _SIZE.unpack(recv_exact(sock, 4))
    answer: Any = decode_response(memoryview(recv_exact(sock, size)), body.API_KEY, version).body
    if answer.error_code:
        raise RuntimeError(f"{type(body).__name__} answered error {answer.error_code}")
    return answer


def _run(args: argparse.Namespace) -> dict[str, float]:
    host, _, port = args.bootstrap.rpartition(":")
    context = ssl.create_default_context(cafile=args.cafile)
    token = f"\0{args.user}\0{args.password}".encode()
    versions = ApiVersionsRequest(client_software_name="bench", client_software_version="1")
    count = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while time.perf_counter() < deadline:
        with (
            socket.create_connection((host, int(port)), timeout=30) as raw,
            context.wrap_socket(raw, server_hostname=host) as sock,
        ):
            _request(sock, versions, 3)
            _request(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1)
            _request(sock, SaslAuthenticateRequest(auth_bytes=token), 2)
        count += 1
    return {"connections": count, "seconds": time.perf_counter() - start}


def connections_per_s(
    bootstrap: str,
    *,
    cafile: str,
    user: str,
    password: str,
    seconds: float,
    processes: int,
) -> tuple[float, int, list[str]]:
    """Connections set up per second by ``processes`` generators at once, how many in all,
    and one generator's argv."""
    argv = [sys.executable, "-m", MODULE, "--bootstrap", bootstrap, "--cafile", cafile]
    argv += ["--user", user, "--password", password, "--seconds", str(seconds)]
    procs = [
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=REPO_ROOT,
        )
        for _ in range(processes)
    ]
    rate, connections = 0.0, 0
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=seconds + 120)
            if proc.returncode != 0:
                raise RuntimeError(f"{MODULE} exited {proc.returncode}:\n{err[-2000:]}")
            figures = json.loads(out.strip().splitlines()[-1])
            rate += figures["connections"] / figures["seconds"]
            connections += figures["connections"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return rate, connections, argv


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--bootstrap", required=True, help="a SASL_SSL listener, HOST:PORT")
    parser.add_argument("--cafile", required=True, help="the certificates to trust (PEM)")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    print(json.dumps(_run(parser.parse_args(argv))), flush=True)


if __name__ == "__main__":
    main()
