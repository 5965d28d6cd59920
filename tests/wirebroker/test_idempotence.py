"""Idempotent producers: InitProducerId, duplicates, gaps, fencing, and retries across restarts.

Raw-protocol tests send hand-built batches with producer ids and sequences and check the
answers (a retried batch gets its original offset and no error; a gap is
OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch INVALID_PRODUCER_EPOCH). Client tests put a
:class:`DroppingProxy` between the client and the broker: it swallows chosen Produce responses
and cuts the connection, so the client must retry batches the broker already wrote -- and one of
those drops restarts the broker (cleanly or with kill -9) before the retry arrives. Reading the
partition back with assign() must show every record exactly once, in order.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages.describe_producers import DescribeProducersRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    init_producer_id,
    make_coordinator_topics,
    produce_request,
    wait_until,
)
from wirebroker.producer_ids import BLOCK_SIZE, FILE_NAME, ProducerIdManager

pytestmark = pytest.mark.integration

TIMEOUT = 60.0


# ---- a proxy that loses Produce responses --------------------------------------------------


class DroppingProxy:
    """Forwards TCP between clients and the broker. When ``drop(n)`` is true for the n-th
    Produce response (from 1), that response is swallowed and both connections are closed
    (``on_drop(n)`` runs first, in the proxy's thread). While ``blocked`` is set, new client
    connections are closed at once."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.drop: Callable[[int], bool] = lambda n: False
        self.on_drop: Callable[[int], None] = lambda n: None
        self.blocked = threading.Event()
        self.produce_responses = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self.server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.blocked.is_set() or self.upstream is None:
            client.close()
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        produce_ids: set[int] = set()
        threading.Thread(
            target=self._requests, args=(client, upstream, produce_ids), daemon=True
        ).start()
        self._responses(upstream, client, produce_ids)

    @staticmethod
    def _frames(sock: socket.socket) -> Iterator[bytes]:
        buf = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + size:
                    break
                yield buf[: 4 + size]
                buf = buf[4 + size :]

    def _requests(self, client: socket.socket, upstream: socket.socket, ids: set[int]) -> None:
        for frame in self._frames(client):
            api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
            if api_key == 0:
                ids.add(correlation_id)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _close(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, ids: set[int]) -> None:
        for frame in self._frames(upstream):
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if correlation_id in ids:
                ids.discard(correlation_id)
                with self._lock:
                    self.produce_responses += 1
                    n = self.produce_responses
                if self.drop(n):
                    self.dropped += 1
                    self.on_drop(n)
                    break
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client, upstream)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


class ProxiedBroker:
    """A broker process that tells clients the proxy's address."""

    def __init__(self, data_dir: Path) -> None:
        self.proxy = DroppingProxy()
        listener = f"PLAINTEXT://127.0.0.1:{self.proxy.port}"
        self.broker = BrokerProcess(data_dir, {"advertised.listeners": listener})
        self.broker.start()
        self.proxy.upstream = ("127.0.0.1", self.broker.port)
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def restart_on_drop(self, which: int, *, clean: bool) -> None:
        """At drop number `which`, restart the broker before the client can retry."""

        def on_drop(n: int) -> None:
            if self.proxy.dropped == which:
                self.proxy.blocked.set()
                self.broker.restart(clean=clean)
                self.restarts += 1
                self.proxy.blocked.clear()

        self.proxy.on_drop = on_drop

    def close(self) -> None:
        self.proxy.close()
        code = self.broker.stop()
        assert code == 0, "\n".join(self.broker.log[-40:])
        tracebacks = [line for line in self.broker.log if line.startswith("Traceback")]
        assert not tracebacks, "\n".join(self.broker.log)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[ProxiedBroker]:
    pb = ProxiedBroker(tmp_path / "data")
    try:
        yield pb
    finally:
        pb.close()


def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []

        def more() -> bool:
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                values.append(m.value() or b"")
            return len(values) >= count

        wait_until(more, TIMEOUT, interval=0, what=f"{count} records")
        # nothing beyond them
        extra = c.consume(100, timeout=1.0)
        values += [m.value() or b"" for m in extra if m.error() is None]
        return values
    finally:
        c.close()


N = 2000


@pytest.mark.parametrize("clean", [True, False], ids=["clean-restart", "kill-9"])
def test_confluent_retries_write_exactly_once(
    proxied: ProxiedBroker, topic: str, clean: bool
) -> None:
    create_topic(proxied.broker.bootstrap, topic)
    proxied.proxy.drop = lambda n: n % 7 == 3
    proxied.restart_on_drop(2, clean=clean)
    p = Producer(
        {
            "bootstrap.servers": proxied.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 50,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        }
    )
    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i in range(N):
        p.produce(topic, b"m%05d" % i, on_delivery=report)
        if i % 100 == 99:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0
    assert errors == []
    assert proxied.proxy.dropped >= 2 and proxied.restarts == 1
    expected = [b"m%05d" % i for i in range(N)]
    assert read_values(proxied.broker.bootstrap, topic, N) == expected


def test_kafka_python_retries_write_exactly_once(proxied: ProxiedBroker, topic: str) -> None:
    from kafka import KafkaProducer

    create_topic(proxied.broker.bootstrap, topic)
    proxied.proxy.drop = lambda n: n % 5 == 2
    proxied.restart_on_drop(2, clean=False)
    p = KafkaProducer(
        bootstrap_servers=proxied.bootstrap,
        linger_ms=2,
        batch_size=2000,
        retry_backoff_ms=20,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=200,
        request_timeout_ms=20_000,
        delivery_timeout_ms=60_000,
    )
    try:
        futures = [p.send(topic, b"m%05d" % i, partition=0) for i in range(N // 2)]
        p.flush(TIMEOUT)
        for f in futures:
            f.get(0)
    finally:
        p.close(5)
    assert proxied.proxy.dropped >= 2 and proxied.restarts == 1
    expected = [b"m%05d" % i for i in range(N // 2)]
    assert read_values(proxied.broker.bootstrap, topic, N // 2) == expected


# ---- raw protocol ----------------------------------------------------------------------------


def produce(c: RawClient, topic: str, seq: int, n: int, pid: int, epoch: int) -> Any:
    records = [
        SimpleRecord(None, b"s%d" % (seq + i), (), int(time.time() * 1000)) for i in range(n)
    ]
    req = produce_request(
        topic, 0, records, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )
    response = c.request(req, 9)
    return response.responses[0].partition_responses[0]


def test_duplicate_gap_and_fenced_epoch(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    r = init_producer_id(broker.bootstrap)
    assert r.error_code == 0 and r.producer_epoch == 0
    pid = r.producer_id
    with RawClient(broker.bootstrap) as c:
        assert produce(c, topic, 0, 3, pid, 0).base_offset == 0
        assert produce(c, topic, 3, 2, pid, 0).base_offset == 3
        dup = produce(c, topic, 0, 3, pid, 0)
        assert (dup.error_code, dup.base_offset) == (0, 0)
        assert produce(c, topic, 9, 1, pid, 0).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, topic, 5, 1, pid, 1).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, topic, 0, 1, pid, 1).base_offset == 5
        assert produce(c, topic, 1, 1, pid, 0).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        request = DescribeProducersRequest(
            topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0, 7])]
        )
        (t,) = c.request(request, 0).topics
    ok, missing = t.partitions
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (state,) = ok.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, 1, 0)


def _init_transactional(bootstrap: str) -> Any:
    """InitProducerId of "tx", asked again while its coordinator is not ready (its partition
    not loaded yet, as after a restart), as clients do."""

    def answered() -> Any:
        r = init_producer_id(bootstrap, transactional_id="tx")
        not_ready = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return None if r.error_code in not_ready else r

    return wait_until(answered, what="the transaction coordinator of tx")


def test_producer_ids_survive_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        for version in range(6):
            r = init_producer_id(b.bootstrap, version)
            assert (r.error_code, r.producer_epoch) == (0, 0)
        before = r.producer_id
        make_coordinator_topics(b.bootstrap, (1,))  # as a client's lookup of its coordinator
        t1 = _init_transactional(b.bootstrap)
        t2 = init_producer_id(b.bootstrap, transactional_id="tx")
        assert t2.producer_id == t1.producer_id and t2.producer_epoch == t1.producer_epoch + 1
        # Into the next block: its ids are handed out only once the file reserves it.
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        with RawClient(b.bootstrap, timeout=TIMEOUT) as c:
            crossing = [c.request(request, 4).producer_id for _ in range(BLOCK_SIZE)]
        handed = {before, t1.producer_id, *crossing}
        assert len(handed) == BLOCK_SIZE + 2 and max(handed) >= BLOCK_SIZE
        b.restart(clean=False)
        after = init_producer_id(b.bootstrap).producer_id
        assert after > max(handed)
        t3 = _init_transactional(b.bootstrap)
        assert (t3.producer_id, t3.producer_epoch) == (t1.producer_id, t2.producer_epoch + 1)
        stale = init_producer_id(
            b.bootstrap, transactional_id="tx", producer_id=t1.producer_id, producer_epoch=0
        )
        assert stale.error_code == ErrorCode.PRODUCER_FENCED
        stale3 = init_producer_id(
            b.bootstrap, 3, transactional_id="tx", producer_id=t1.producer_id, producer_epoch=0
        )
        assert stale3.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        bad = init_producer_id(b.bootstrap, transactional_id="tx", transaction_timeout_ms=0)
        assert bad.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    finally:
        b.stop()


def test_producer_ids_from_external_blocks(tmp_path: Path) -> None:
    """In a cluster the blocks come from ZooKeeper (`fetch_block`): the local file never
    reserves one, and the requests that arrive during a fetch wait for it."""
    ids = ProducerIdManager.open(tmp_path)
    assert ids.needs_block  # a fresh broker has none
    blocks = iter([(3000, 3001), (5000, 5999)])
    fetches = 0

    async def fetch_block() -> tuple[int, int]:
        nonlocal fetches
        fetches += 1
        await trio.lowlevel.checkpoint()  # the other requests arrive meanwhile
        return next(blocks)

    async def main() -> list[int]:
        got: list[int] = []

        async def one() -> None:
            got.append(await ids.next_producer_id(fetch_block))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
        return got

    assert sorted(trio.run(main)) == [3000, 3001, 5000]
    assert fetches == 2
    assert not (tmp_path / FILE_NAME).exists()


def test_duplicates_detected_after_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    topic = "dups"
    try:
        create_topic(b.bootstrap, topic)
        pid = init_producer_id(b.bootstrap).producer_id
        with RawClient(b.bootstrap) as c:
            for i in range(8):
                assert produce(c, topic, i * 2, 2, pid, 0).base_offset == i * 2
        for clean in (True, False):
            b.restart(clean=clean)
            with RawClient(b.bootstrap) as c:
                for i in range(3, 8):  # the last five batches
                    r = produce(c, topic, i * 2, 2, pid, 0)
                    assert (r.error_code, r.base_offset) == (0, i * 2)
                r = produce(c, topic, 4, 2, pid, 0)
                assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        b.stop()
