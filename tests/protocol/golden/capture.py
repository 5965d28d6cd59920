"""Capture golden Kafka protocol frames from real clients talking to a real Kafka 3.9 broker.

Dev tool (not part of ``protocol/``). It owns:

* ``RecordingProxy``: a TCP proxy that forwards bytes unchanged between clients and the
  broker while recording every request and response frame (size prefix removed), with
  api_key / api_version / correlation_id / client_id taken from the request header and
  responses matched to requests by correlation id, per connection.
* the capture scenarios: librdkafka (confluent-kafka) and the Java client (Kafka's own
  CLI tools run by main class) producing with every compression codec, consuming in a
  group, and creating topics.
* selecting a few frames per (client, api, version, direction) and writing them to
  ``frames/`` plus ``frames/index.json``.

Nothing is rewritten: the broker's client-facing listener *advertises the proxy's port*
(see ``compat.kafka_process.kafka_broker(client_advertised_port=...)``), so the Metadata
and FindCoordinator responses send clients back through the proxy by themselves.

Run (after ``make jars``)::

    .venv/bin/python tests/protocol/golden/capture.py
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from compat import kafka_process as kp  # noqa: E402

FRAMES_DIR = HERE / "frames"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
MAX_PER_KEY = 3
CLIENT_ID_PREFIX = "golden-"

API_NAMES: dict[int, str] = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    47: "OffsetDelete",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    56: "AlterPartition",
    57: "UpdateFeatures",
    60: "DescribeCluster",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    74: "ListClientMetricsResources",
    75: "DescribeTopicPartitions",
}
API_VERSIONS_KEY = 18
HEARTBEAT_KEY = 12
FETCH_KEY = 1
UNSUPPORTED_VERSION = 35


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"Api{api_key}")


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# --------------------------------------------------------------------------- proxy


@dataclass
class Frame:
    """One recorded frame (without its 4-byte size prefix)."""

    seq: int
    conn: int
    direction: str  # "request" | "response"
    api_key: int
    api_version: int  # version to decode this frame with
    request_api_version: int  # version the client asked for
    correlation_id: int
    client_id: str | None
    data: bytes
    partner: Frame | None = None  # the matching request/response


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            if buf:
                raise ConnectionError("connection closed mid-frame")
            return None
        buf += chunk
    return bytes(buf)


def parse_request_header(data: bytes) -> tuple[int, int, int, str | None]:
    """(api_key, api_version, correlation_id, client_id) of a request frame.

    Every request header version (v0, v1, v2) starts with these; client_id is a
    nullable int16-length string in v1/v2 (ControlledShutdown v0 has none).
    """
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", data, 0)
    client_id: str | None = None
    if len(data) >= 10:
        (n,) = struct.unpack_from(">h", data, 8)
        if 0 <= n <= len(data) - 10:
            client_id = data[10 : 10 + n].decode("utf-8", errors="replace")
    return api_key, api_version, correlation_id, client_id


class RecordingProxy:
    """Thread-based TCP proxy that records Kafka frames and forwards them unchanged."""

    def __init__(self, listen_port: int, host: str = kp.LOOPBACK) -> None:
        self.host = host
        self.listen_port = listen_port
        self.upstream: tuple[str, int] | None = None
        self.frames: list[Frame] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._conn_ids = 0
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, listen_port))
        self._listener.listen(64)
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True)

    # lifecycle
    def start(self) -> RecordingProxy:
        self._accept_thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, close every connection and join the pump threads."""
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            socks = list(self._sockets)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._accept_thread.join(timeout=5)
        for t in list(self._threads):
            t.join(timeout=5)

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # queries
    def snapshot(self) -> list[Frame]:
        with self._lock:
            return list(self.frames)

    def wait_for(self, predicate: Callable[[Frame], bool], timeout: float, what: str) -> Frame:
        """Block until a recorded frame satisfies ``predicate`` (readiness, not a sleep)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            frames = self.snapshot()
            for f in frames[seen:]:
                if predicate(f):
                    return f
            seen = len(frames)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no frame for {what} within {timeout:.0f}s")
            time.sleep(0.05)

    # internals
    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.upstream is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conn_ids += 1
                conn = self._conn_ids
                self._sockets.update((client, upstream))
            pending: dict[int, Frame] = {}
            for target, args in (
                (self._pump_requests, (conn, client, upstream, pending)),
                (self._pump_responses, (conn, upstream, client, pending)),
            ):
                t = threading.Thread(target=target, args=args, daemon=True)
                t.start()
                self._threads.append(t)

    def _record(self, frame: Frame) -> None:
        with self._lock:
            self._seq += 1
            frame.seq = self._seq
            self.frames.append(frame)

    def _finish(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RD)

    def _pump_requests(
        self, conn: int, src: socket.socket, dst: socket.socket, pending: dict[int, Frame]
    ) -> None:
        try:
            while True:
                size_bytes = _recv_exact(src, 4)
                if size_bytes is None:
                    break
                (size,) = struct.unpack(">i", size_bytes)
                data = _recv_exact(src, size)
                if data is None:
                    break
                api_key, api_version, corr, client_id = parse_request_header(data)
                frame = Frame(
                    0, conn, "request", api_key, api_version, api_version, corr, client_id, data
                )
                with self._lock:
                    pending[corr] = frame
                self._record(frame)  # recorded before forwarding: the response comes later
                dst.sendall(size_bytes + data)
        except OSError:
            pass
        finally:
            self._finish(src, dst)

    def _pump_responses(
        self, conn: int, src: socket.socket, dst: socket.socket, pending: dict[int, Frame]
    ) -> None:
        try:
            while True:
                size_bytes = _recv_exact(src, 4)
                if size_bytes is None:
                    break
                (size,) = struct.unpack(">i", size_bytes)
                data = _recv_exact(src, size)
                if data is None:
                    break
                (corr,) = struct.unpack_from(">i", data, 0)
                with self._lock:
                    req = pending.pop(corr, None)
                if req is None:
                    print(f"capture: response with unknown correlation id {corr}", file=sys.stderr)
                else:
                    version = req.api_version
                    if req.api_key == API_VERSIONS_KEY and len(data) >= 6:
                        # KIP-511: an ApiVersions request of a version the broker does not
                        # know is answered with error UNSUPPORTED_VERSION encoded as v0.
                        (err,) = struct.unpack_from(">h", data, 4)
                        if err == UNSUPPORTED_VERSION:
                            version = 0
                    frame = Frame(
                        0,
                        conn,
                        "response",
                        req.api_key,
                        version,
                        req.api_version,
                        corr,
                        req.client_id,
                        data,
                        partner=req,
                    )
                    req.partner = frame
                    self._record(frame)
                dst.sendall(size_bytes + data)
        except OSError:
            pass
        finally:
            self._finish(src, dst)


# --------------------------------------------------------------------------- scenarios


@dataclass
class Env:
    """What the scenarios need: the proxy (bootstrap address) and a scratch folder."""

    proxy: RecordingProxy
    bootstrap: str
    scratch: Path
    timeout: float = 60.0


def _heartbeat_seen(env: Env, client_id: str, timeout: float) -> None:
    env.proxy.wait_for(
        lambda f: (
            f.direction == "response" and f.api_key == HEARTBEAT_KEY and f.client_id == client_id
        ),
        timeout,
        f"a Heartbeat response to {client_id}",
    )


def _records(client: str, codec: str) -> list[tuple[bytes | None, bytes | None, list]]:
    """(key, value, headers) per message: keys, headers, one null value, one null key."""
    out: list[tuple[bytes | None, bytes | None, list]] = []
    for i in range(4):
        out.append(
            (
                f"key-{i}".encode(),
                f"{client} {codec} value {i} ".encode() * (i + 1),
                [("trace", f"t{i}".encode()), ("codec", codec.encode())],
            )
        )
    out.append((b"key-null-value", None, [("tombstone", b"1")]))
    out.append((None, f"{client} {codec} value without key".encode(), []))
    return out


def librdkafka_scenario(env: Env) -> None:
    """confluent-kafka (librdkafka): create topics, produce per codec, consume in a group."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = [f"golden-librdkafka-{c}" for c in CODECS]
    admin = AdminClient(
        {"bootstrap.servers": env.bootstrap, "client.id": "golden-librdkafka-admin"}
    )
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]
    )
    for fut in futures.values():
        fut.result(timeout=env.timeout)
    del admin

    expected = 0
    runs: list[tuple[str, str, dict[str, object]]] = [
        (c, f"golden-librdkafka-{c}", {}) for c in CODECS
    ]
    runs.append(("none", "golden-librdkafka-none", {"enable.idempotence": True}))
    for codec, topic, extra in runs:
        variant = "idempotent" if extra else codec
        errors: list[str] = []

        def on_delivery(err: object, _msg: object, errors: list[str] = errors) -> None:
            if err is not None:
                errors.append(str(err))

        producer = Producer(
            {
                "bootstrap.servers": env.bootstrap,
                "client.id": f"golden-librdkafka-produce-{variant}",
                "compression.type": codec,
                "linger.ms": 20,
                "acks": "all",
                **extra,
            }
        )
        for key, value, headers in _records("librdkafka", variant):
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
        if producer.flush(env.timeout) != 0 or errors:
            raise RuntimeError(f"librdkafka produce ({variant}) failed: {errors}")
        expected += len(_records("librdkafka", variant))
        del producer

    client_id = "golden-librdkafka-consumer"
    consumer = Consumer(
        {
            "bootstrap.servers": env.bootstrap,
            "client.id": client_id,
            "group.id": "golden-librdkafka-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "heartbeat.interval.ms": 300,
            "session.timeout.ms": 10000,
            "fetch.wait.max.ms": 200,
        }
    )
    try:
        consumer.subscribe(topics)
        got = 0
        deadline = time.monotonic() + env.timeout
        while got < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"librdkafka consumer got {got}/{expected} messages")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got += 1
        consumer.commit(asynchronous=False)
        # Keep polling (the group stays alive) until a Heartbeat round trip was recorded.
        deadline = time.monotonic() + env.timeout
        while True:
            try:
                _heartbeat_seen(env, client_id, 0)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
                consumer.poll(0.2)
    finally:
        consumer.close()  # LeaveGroup


def _write_props(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def java_scenario(env: Env) -> None:
    """Java client via Kafka's CLI tools: TopicCommand, ConsoleProducer, ConsoleConsumer."""
    topics = [f"golden-java-{c}" for c in CODECS]
    admin_cfg = _write_props(env.scratch / "admin.properties", {"client.id": "golden-java-admin"})
    for topic in topics:
        kp.run_kafka_tool(
            "org.apache.kafka.tools.TopicCommand",
            ["--bootstrap-server", env.bootstrap, "--command-config", str(admin_cfg),
             "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1"],
            timeout=env.timeout,
        )  # fmt: skip

    expected = 0
    for codec, topic in zip(CODECS, topics, strict=True):
        lines = []
        for key, value, headers in _records("java", codec):
            if key is None:
                continue  # the console producer cannot send a null key with parse.key
            hdr = ",".join(f"{k}:{v.decode()}" for k, v in headers) or "src:java"
            val = "NULL" if value is None else value.decode()
            lines.append(f"{hdr}\t{key.decode()}|{val}")
        kp.run_kafka_tool(
            "kafka.tools.ConsoleProducer",
            [
                "--bootstrap-server", env.bootstrap,
                "--topic", topic,
                "--compression-codec", codec,
                "--property", "parse.key=true",
                "--property", "key.separator=|",
                "--property", "parse.headers=true",
                "--property", "null.marker=NULL",
                "--producer-property", f"client.id=golden-java-produce-{codec}",
            ],
            input=("\n".join(lines) + "\n").encode(),
            timeout=env.timeout,
        )  # fmt: skip
        expected += len(lines)

    client_id = "golden-java-consumer"
    argv = kp.kafka_tool_command(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        [
            "--bootstrap-server", env.bootstrap,
            "--include", "golden-java-.*",
            "--group", "golden-java-group",
            "--from-beginning",
            "--property", "print.key=true",
            "--property", "print.headers=true",
            "--consumer-property", f"client.id={client_id}",
            "--consumer-property", "heartbeat.interval.ms=300",
            "--consumer-property", "fetch.max.wait.ms=200",
            "--consumer-property", "auto.commit.interval.ms=500",
        ],
    )  # fmt: skip
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out_lines: list[bytes] = []
    err_chunks: list[bytes] = []
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr

    def read_stdout() -> None:
        for line in iter(stdout.readline, b""):
            out_lines.append(line)

    readers = [
        threading.Thread(target=read_stdout, daemon=True),
        threading.Thread(target=lambda: err_chunks.append(stderr.read()), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + env.timeout
        while len(out_lines) < expected:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"ConsoleConsumer printed {len(out_lines)}/{expected} records "
                    f"(exit {proc.poll()}): {b''.join(err_chunks)[-2000:]!r}"
                )
            time.sleep(0.05)
        # Wait for an OffsetCommit (auto-commit) and a Heartbeat round trip.
        env.proxy.wait_for(
            lambda f: f.direction == "response" and f.api_key == 8 and f.client_id == client_id,
            env.timeout,
            "an OffsetCommit response to the Java consumer",
        )
        _heartbeat_seen(env, client_id, env.timeout)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # shutdown hook: commit + LeaveGroup + close
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for t in readers:
            t.join(timeout=5)


SCENARIOS: dict[str, Callable[[Env], None]] = {
    "librdkafka": librdkafka_scenario,
    "java": java_scenario,
}


# --------------------------------------------------------------------------- selection


def client_of(frame: Frame) -> str | None:
    """'librdkafka' / 'java' from client ids ``golden-<client>-<role>``; None otherwise."""
    cid = frame.client_id or ""
    if not cid.startswith(CLIENT_ID_PREFIX):
        return None
    return cid[len(CLIENT_ID_PREFIX) :].split("-", 1)[0]


def variant_of(frame: Frame) -> str:
    """Produce frames are kept per codec run: the codec (or 'idempotent') from the client id."""
    if frame.api_key != 0:
        return ""
    cid = frame.client_id or ""
    m = re.search(r"-produce-([a-z0-9]+)$", cid)
    return m.group(1) if m else ""


@dataclass
class Exchange:
    client: str
    variant: str
    request: Frame
    response: Frame | None

    @property
    def key(self) -> tuple[str, int, int, str]:
        return (self.client, self.request.api_key, self.request.api_version, self.variant)


def batch_codecs(data: bytes) -> set[int]:
    """Compression codecs (attributes & 7) of the v2 record batches found in ``data``.

    A scan for batch headers whose CRC-32C checks out, so it needs no message parser.
    """
    import crc32c

    found: set[int] = set()
    i = 0
    while i + 61 <= len(data):
        if data[i + 16] == 2:
            base_offset, batch_length = struct.unpack_from(">qi", data, i)
            end = i + 12 + batch_length
            if 0 <= base_offset < 1 << 48 and batch_length >= 49 and end <= len(data):
                (crc,) = struct.unpack_from(">I", data, i + 17)
                if crc32c.crc32c(data[i + 21 : end]) == crc:
                    found.add(struct.unpack_from(">h", data, i + 21)[0] & 0x7)
                    i = end
                    continue
        i += 1
    return found


def select_exchanges(frames: list[Frame], per_key: int = MAX_PER_KEY) -> list[Exchange]:
    """At most ``per_key`` request/response pairs per (client, api, version, variant).

    Picks, when distinct: the biggest exchange (most records, most fields), the smallest,
    then the one whose size differs most from those; identical frames (ignoring
    correlation ids) are skipped.
    """
    groups: dict[tuple[str, int, int, str], list[Exchange]] = defaultdict(list)
    for f in frames:
        if f.direction != "request":
            continue
        client = client_of(f)
        if client is None:
            continue
        ex = Exchange(client, variant_of(f), f, f.partner)
        groups[ex.key].append(ex)

    def size(ex: Exchange) -> int:
        return len(ex.request.data) + (len(ex.response.data) if ex.response else 0)

    def fingerprint(ex: Exchange) -> bytes:
        h = hashlib.sha256(ex.request.data[8:])
        if ex.response:
            h.update(ex.response.data[4:])
        return h.digest()

    chosen: list[Exchange] = []
    for key in sorted(groups):
        group = groups[key]
        picks: list[Exchange] = []
        seen: set[bytes] = set()
        if key[1] == FETCH_KEY:
            # Fetch responses first cover every compression codec found in their batches
            # (may go past per_key), so the record-batch tests see each codec fetched back.
            covered: set[int] = set()
            for ex in sorted(group, key=size, reverse=True):
                codecs = batch_codecs(ex.response.data) if ex.response else set()
                if codecs - covered:
                    covered |= codecs
                    seen.add(fingerprint(ex))
                    picks.append(ex)
        # Largest first, smallest next, then whatever is farthest in size from the picks.
        candidates = sorted(group, key=size, reverse=True)
        if candidates:
            candidates.insert(1, candidates.pop())
        while candidates and len(picks) < per_key:
            if len(picks) >= 2:
                candidates.sort(
                    key=lambda e: (-min(abs(size(e) - size(p)) for p in picks), e.request.seq)
                )
            ex = candidates.pop(0)
            fp = fingerprint(ex)
            if fp in seen:
                continue
            seen.add(fp)
            picks.append(ex)
        chosen.extend(sorted(picks, key=lambda e: e.request.seq))
    return chosen


def write_frames(
    exchanges: list[Exchange], out_dir: Path, meta: dict[str, object]
) -> list[dict[str, object]]:
    """Write one ``.bin`` per frame and ``index.json``; returns the index entries."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.bin"):
        old.unlink()
    entries: list[dict[str, object]] = []
    counters: dict[tuple[str, int, int, str], int] = defaultdict(int)
    for ex in exchanges:
        counters[ex.key] += 1
        n = counters[ex.key]
        names: dict[str, str] = {}
        pair = [("request", ex.request)] + ([("response", ex.response)] if ex.response else [])
        for direction, f in pair:
            variant = f"-{ex.variant}" if ex.variant else ""
            names[direction] = (
                f"{ex.client}-{snake(api_name(f.api_key))}-v{f.request_api_version}"
                f"-{direction}{variant}-{n}.bin"
            )
        for direction, f in pair:
            (out_dir / names[direction]).write_bytes(f.data)
            entry: dict[str, object] = {
                "file": names[direction],
                "client": ex.client,
                "client_id": f.client_id,
                "api_key": f.api_key,
                "api_name": api_name(f.api_key),
                "api_version": f.api_version,
                "direction": direction,
                "correlation_id": f.correlation_id,
                "size": len(f.data),
            }
            if f.api_version != f.request_api_version:
                entry["request_api_version"] = f.request_api_version
            if ex.variant:
                entry["variant"] = ex.variant
                if ex.variant in CODECS:
                    entry["compression"] = ex.variant
            other = "response" if direction == "request" else "request"
            if other in names:
                entry["pair"] = names[other]
            entries.append(entry)
    index = {**meta, "frames": entries}
    (out_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return entries


# --------------------------------------------------------------------------- main


@contextlib.contextmanager
def proxied_cluster() -> Iterator[tuple[kp.KafkaCluster, RecordingProxy]]:
    """ZooKeeper + Kafka whose client listener advertises a recording proxy's port."""
    proxy_port = kp.free_port()
    with (
        RecordingProxy(proxy_port) as proxy,
        kp.kafka_cluster(client_advertised_port=proxy_port, log_level="WARN") as cluster,
    ):
        assert cluster.broker.client_port is not None
        proxy.upstream = (cluster.broker.host, cluster.broker.client_port)
        yield cluster, proxy


def _client_versions() -> dict[str, str]:
    import confluent_kafka

    return {
        "librdkafka": f"librdkafka {confluent_kafka.libversion()[0]} "
        f"(confluent-kafka {confluent_kafka.__version__})",
        "java": f"kafka-clients {kp.kafka_version()} (Kafka CLI tools)",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FRAMES_DIR, help="output folder")
    parser.add_argument(
        "--clients", default=",".join(SCENARIOS), help="comma-separated: librdkafka,java"
    )
    parser.add_argument("--per-key", type=int, default=MAX_PER_KEY)
    parser.add_argument("--timeout", type=float, default=60.0, help="per-step timeout (s)")
    args = parser.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown clients: {sorted(unknown)}")
    if not kp.jars_available():
        print("capture: Kafka jars missing; run `make jars` first", file=sys.stderr)
        return 2

    scratch = Path(tempfile.mkdtemp(prefix="wb-golden-"))
    try:
        with proxied_cluster() as (cluster, proxy):
            env = Env(proxy, cluster.bootstrap_servers, scratch, args.timeout)
            for client in clients:
                t0 = time.monotonic()
                SCENARIOS[client](env)
                print(f"capture: {client} done in {time.monotonic() - t0:.1f}s", file=sys.stderr)
            frames = proxy.snapshot()
            broker_meta = {
                "node_id": cluster.broker.broker_id,
                "host": cluster.broker.host,
                "advertised_port": proxy.listen_port,
            }
        # Proxy and cluster are closed here: no frame is still being written.
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    exchanges = select_exchanges(frames, args.per_key)
    meta: dict[str, object] = {
        "kafka_version": kp.kafka_version(),
        "clients": {c: v for c, v in _client_versions().items() if c in clients},
        "broker": broker_meta,
        "note": "Frames without the 4-byte size prefix; regenerate with `make golden`.",
    }
    entries = write_frames(exchanges, args.out, meta)
    total = sum((args.out / str(e["file"])).stat().st_size for e in entries)
    print(
        f"capture: recorded {len(frames)} frames, kept {len(entries)} ({total} bytes) in {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
