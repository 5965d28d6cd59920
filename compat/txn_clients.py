"""The clients of the transaction scenarios (``compat/transactions.py``) behind one interface.

Each client with a transactional producer sits behind :class:`TxnClient`: confluent-kafka,
kafka-python, aiokafka (on an asyncio loop of its own in a thread) and the Java client
(``compat/java/TxnClient.java``, a single-file program on Kafka's jars, compiled once per run,
driven line by line over stdin/stdout). kcat has no transactional producer. A client's errors
become :class:`ClientError` named as that client names them (exception class, or librdkafka's
error name), so an observation says what an application would see. Records are
``(offset, key, value)`` as the application got them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

from compat.kafka_process import jars_dir, java_executable, kafka_tool_command

CLIENTS = ("confluent-kafka", "java", "kafka-python", "aiokafka")
TIMEOUT = 30.0
JAVA_PROGRAM = Path(__file__).parent / "java" / "TxnClient.java"

Record = tuple[int, str | None, str]
T = TypeVar("T")


class ClientError(Exception):
    """A client call failed; ``name`` is the client's own name for the error."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name


class TxnClient(Protocol):
    """One client instance: a transactional producer, and a read_committed group member."""

    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, partition: int, key: str, value: str) -> None: ...
    def flush(self) -> list[int | str]:
        """Wait for every send so far: each one's offset, or the client's error name."""
        ...

    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def subscribe(self, group: str, topic: str) -> None: ...
    def poll(self, n: int) -> list[Record]: ...
    def seek(self, topic: str, partition: int, offset: int) -> None: ...
    def send_offsets(self, topic: str, partition: int, offset: int) -> None:
        """The member's next offset, committed with the transaction (its group metadata)."""
        ...

    def read(self, topic: str, partition: int, isolation: str, end: int) -> list[Record]:
        """A fresh consumer from the start until its position is ``end``: what it got."""
        ...

    def close(self) -> None: ...


def open_client(
    client: str, bootstrap: str, transactional_id: str, transaction_timeout_ms: int | None = None
) -> TxnClient:
    """A client with a transactional producer for ``transactional_id`` (not yet initialised)."""
    kinds: dict[str, Callable[[str, str, int | None], TxnClient]] = {
        "confluent-kafka": ConfluentTxn,
        "java": JavaTxn,
        "kafka-python": KafkaPythonTxn,
        "aiokafka": AiokafkaTxn,
    }
    return kinds[client](bootstrap, transactional_id, transaction_timeout_ms)


def error_of(call: Callable[[], object]) -> str | None:
    """The client's error name for ``call()``, or None when it succeeds."""
    try:
        call()
    except ClientError as e:
        return e.name
    return None


def deadline_loop(what: str) -> Callable[[], None]:
    """A check to call in a loop: it fails the loop ``TIMEOUT`` seconds from now."""
    deadline = time.monotonic() + TIMEOUT

    def check() -> None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT:.0f} s: {what}")

    return check


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


# --------------------------------------------------------------------------- blocking clients


class _Polling:
    """What confluent-kafka and kafka-python share: a group member whose polled records wait
    in ``buffer`` until asked for, and reading a partition to a position."""

    name = ""
    bootstrap = ""
    member: Any = None
    buffer: list[Record]

    def _consumer(self, group: str | None, isolation: str) -> Any:
        raise NotImplementedError

    def _poll_once(self, consumer: Any) -> None:
        """One poll of ``consumer`` (at most 100 ms); what it got goes to ``buffer``."""
        raise NotImplementedError

    def _position(self, consumer: Any, topic: str, partition: int) -> int:
        raise NotImplementedError

    def _subscribe(self, consumer: Any, topic: str) -> None:
        consumer.subscribe([topic])

    def subscribe(self, group: str, topic: str) -> None:
        self.member = self._consumer(group, "read_committed")
        self._subscribe(self.member, topic)
        check = deadline_loop(f"{self.name}: no partitions assigned")
        while not self.member.assignment():
            check()
            self._poll_once(self.member)

    def poll(self, n: int) -> list[Record]:
        check = deadline_loop(f"{self.name}: {n} records")
        while len(self.buffer) < n:
            check()
            self._poll_once(self.member)
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _drain(self, consumer: Any, topic: str, partition: int, end: int) -> list[Record]:
        """What ``consumer`` (assigned, at the start) gets until its position is ``end``."""
        saved, self.buffer = self.buffer, []
        try:
            check = deadline_loop(f"{self.name}: position {end} of {topic}")
            while self._position(consumer, topic, partition) < end:
                check()
                self._poll_once(consumer)
            return self.buffer
        finally:
            self.buffer = saved
            consumer.close()


# --------------------------------------------------------------------------- confluent-kafka


class ConfluentTxn(_Polling):
    name = "confluent-kafka"

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None) -> None:
        from confluent_kafka import Producer

        self.bootstrap = bootstrap
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
        }
        if timeout_ms is not None:
            conf["transaction.timeout.ms"] = timeout_ms
        self.producer = Producer(conf)
        self.outcomes: list[tuple[Any, Any] | None] = []
        self.member: Any = None
        self.buffer: list[Record] = []

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        from confluent_kafka import KafkaException

        try:
            return fn(*args)
        except KafkaException as e:
            raise ClientError(e.args[0].name(), e.args[0].str()) from e

    def init(self) -> None:
        self._call(self.producer.init_transactions, TIMEOUT)

    def begin(self) -> None:
        self._call(self.producer.begin_transaction)

    def send(self, topic: str, partition: int, key: str, value: str) -> None:
        i = len(self.outcomes)
        self.outcomes.append(None)

        def delivered(err: Any, msg: Any) -> None:
            # Kept as objects: flush() may be raising a fatal error meanwhile, and a call
            # into the C extension now would fail.
            self.outcomes[i] = (err, msg)

        self._call(self.producer.produce, topic, value.encode(), key.encode(), partition, delivered)

    def flush(self) -> list[int | str]:
        from confluent_kafka import KafkaException

        try:
            self.producer.flush(TIMEOUT)
            failed = None
        except KafkaException as e:  # a fatal error (fenced) raises from flush()
            failed = f"flush: {e.args[0].name()}"
        out: list[int | str] = []
        for outcome in self.outcomes:
            if outcome is None:
                assert failed, "confluent-kafka: a delivery went unreported after flush()"
                out.append(failed)
            else:
                err, msg = outcome
                out.append(msg.offset() if err is None else err.name())
        self.outcomes = []
        return out

    def commit(self) -> None:
        self._call(self.producer.commit_transaction, TIMEOUT)

    def abort(self) -> None:
        self._call(self.producer.abort_transaction, TIMEOUT)

    def _consumer(self, group: str | None, isolation: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group,
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )

    def _poll_once(self, consumer: Any) -> None:
        m = consumer.poll(0.1)
        if m is None:
            return
        if m.error():
            raise ClientError(m.error().name(), m.error().str())
        self.buffer.append((m.offset(), _text(m.key()), m.value().decode()))

    def _position(self, consumer: Any, topic: str, partition: int) -> int:
        from confluent_kafka import TopicPartition

        return int(consumer.position([TopicPartition(topic, partition)])[0].offset)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.buffer = []
        self._call(self.member.seek, TopicPartition(topic, partition, offset))

    def send_offsets(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self._call(
            self.producer.send_offsets_to_transaction,
            [TopicPartition(topic, partition, offset)],
            self.member.consumer_group_metadata(),
            TIMEOUT,
        )

    def read(self, topic: str, partition: int, isolation: str, end: int) -> list[Record]:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = self._consumer(f"read-{uuid.uuid4().hex[:8]}", isolation)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        return self._drain(consumer, topic, partition, end)

    def close(self) -> None:
        from confluent_kafka import KafkaException

        if self.member is not None:
            self.member.close()
        with contextlib.suppress(KafkaException):  # raised again by a fenced producer
            self.producer.flush(5)


# --------------------------------------------------------------------------- kafka-python


class KafkaPythonTxn(_Polling):
    name = "kafka-python"

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None) -> None:
        from kafka import KafkaProducer

        self.bootstrap = bootstrap
        extra = {} if timeout_ms is None else {"transaction_timeout_ms": timeout_ms}
        self.producer = self._call(
            KafkaProducer, bootstrap_servers=bootstrap, transactional_id=transactional_id, **extra
        )
        self.futures: list[Any] = []
        self.member: Any = None
        self.buffer: list[Record] = []

    @staticmethod
    def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        from kafka.errors import KafkaError

        try:
            return fn(*args, **kwargs)
        except KafkaError as e:
            raise ClientError(type(e).__name__, str(e)) from e

    def init(self) -> None:
        self._call(self.producer.init_transactions)

    def begin(self) -> None:
        self._call(self.producer.begin_transaction)

    def send(self, topic: str, partition: int, key: str, value: str) -> None:
        future = self._call(
            self.producer.send, topic, value=value.encode(), key=key.encode(), partition=partition
        )
        self.futures.append(future)

    def flush(self) -> list[int | str]:
        from kafka.errors import KafkaError

        with contextlib.suppress(KafkaError):  # each send's outcome says it
            self.producer.flush(TIMEOUT)
        out: list[int | str] = []
        for f in self.futures:
            try:
                out.append(f.get(TIMEOUT).offset)
            except KafkaError as e:
                out.append(type(e).__name__)
        self.futures = []
        return out

    def commit(self) -> None:
        self._call(self.producer.commit_transaction)

    def abort(self) -> None:
        self._call(self.producer.abort_transaction)

    def _consumer(self, group: str | None, isolation: str) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            isolation_level=isolation,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )

    def _subscribe(self, consumer: Any, topic: str) -> None:
        # kafka-python joins the group without waiting for the subscribed topic's metadata (it
        # waits only for patterns, KAFKA-3949): its first assignment, made before its metadata
        # refresh (held back by retry_backoff_ms), is empty ("No partition metadata"), and the
        # metadata that follows makes it rejoin. In kafka-python 3.0.12 that rejoin is lost when
        # poll's timeout ends while the JoinGroup is in flight: by then the leader's assignment
        # snapshot matches the metadata, so the next poll sees nothing to rejoin for and never
        # completes the join (empty assignment, heartbeats off). Under load 2-3 runs in 40 hang
        # so, on Kafka 3.9 as on wirebroker. Learning the topic first makes the first assignment
        # the right one; the scenarios are about transactions.
        consumer.partitions_for_topic(topic)
        consumer.subscribe([topic])

    def _poll_once(self, consumer: Any) -> None:
        for messages in consumer.poll(100).values():
            for m in messages:
                self.buffer.append((m.offset, _text(m.key), m.value.decode()))

    def _position(self, consumer: Any, topic: str, partition: int) -> int:
        from kafka import TopicPartition

        return int(consumer.position(TopicPartition(topic, partition)))

    def seek(self, topic: str, partition: int, offset: int) -> None:
        from kafka import TopicPartition

        self.buffer = []
        self.member.seek(TopicPartition(topic, partition), offset)

    def send_offsets(self, topic: str, partition: int, offset: int) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        offsets = {TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)}
        # KIP-447's group metadata from kafka-python 3; 2.x (pyproject allows >= 2.2) takes
        # the group id alone.
        group_metadata = getattr(self.member, "group_metadata", None)
        group = group_metadata() if group_metadata else self.member.config["group_id"]
        self._call(self.producer.send_offsets_to_transaction, offsets, group)

    def read(self, topic: str, partition: int, isolation: str, end: int) -> list[Record]:
        from kafka import TopicPartition

        consumer = self._consumer(None, isolation)
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return self._drain(consumer, topic, partition, end)

    def close(self) -> None:
        if self.member is not None:
            self.member.close()
        self.producer.close(5)


# --------------------------------------------------------------------------- aiokafka


class AiokafkaTxn:
    """aiokafka on an event loop of its own, running in a thread between calls (so its
    producer's sender and its member's heartbeats go on while the scenario waits)."""

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None) -> None:
        self.bootstrap = bootstrap
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.producer: Any = None
        self.sends: list[Any] = []
        self.member: Any = None
        self.group = ""
        self.buffer: list[Record] = []

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        from aiokafka.errors import KafkaError

        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(TIMEOUT * 2)
        except KafkaError as e:
            raise ClientError(type(e).__name__, str(e)) from e

    def init(self) -> None:
        from aiokafka import AIOKafkaProducer

        async def start() -> Any:
            extra = {} if self.timeout_ms is None else {"transaction_timeout_ms": self.timeout_ms}
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, transactional_id=self.transactional_id, **extra
            )
            await producer.start()  # InitProducerId happens here
            return producer

        self.producer = self._run(start())

    def begin(self) -> None:
        self._run(self.producer.begin_transaction())

    def send(self, topic: str, partition: int, key: str, value: str) -> None:
        self.sends.append(
            self._run(self.producer.send(topic, value.encode(), key.encode(), partition))
        )

    def flush(self) -> list[int | str]:
        from aiokafka.errors import KafkaError

        async def outcomes() -> list[int | str]:
            out: list[int | str] = []
            for f in self.sends:
                try:
                    out.append((await f).offset)
                except KafkaError as e:
                    out.append(type(e).__name__)
            return out

        out = self._run(outcomes())
        self.sends = []
        return out

    def commit(self) -> None:
        self._run(self.producer.commit_transaction())

    def abort(self) -> None:
        self._run(self.producer.abort_transaction())

    async def _consumer(self, group: str | None, isolation: str) -> Any:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            isolation_level=isolation,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        return consumer

    def _take(self, polled: dict[Any, list[Any]]) -> None:
        for messages in polled.values():
            for m in messages:
                self.buffer.append((m.offset, _text(m.key), m.value.decode()))

    def subscribe(self, group: str, topic: str) -> None:
        async def join() -> None:
            self.member = await self._consumer(group, "read_committed")
            self.member.subscribe([topic])
            check = deadline_loop("aiokafka: no partitions assigned")
            while not self.member.assignment():
                check()
                self._take(await self.member.getmany(timeout_ms=100))

        self.group = group
        self._run(join())

    def poll(self, n: int) -> list[Record]:
        async def more() -> None:
            check = deadline_loop(f"aiokafka: {n} records")
            while len(self.buffer) < n:
                check()
                self._take(await self.member.getmany(timeout_ms=100))

        self._run(more())
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def seek(self, topic: str, partition: int, offset: int) -> None:
        from aiokafka import TopicPartition

        async def seek() -> None:
            self.member.seek(TopicPartition(topic, partition), offset)

        self.buffer = []
        self._run(seek())

    def send_offsets(self, topic: str, partition: int, offset: int) -> None:
        from aiokafka import TopicPartition

        # aiokafka 0.14 takes the group id alone (no KIP-447 group metadata).
        self._run(
            self.producer.send_offsets_to_transaction(
                {TopicPartition(topic, partition): offset}, self.group
            )
        )

    def read(self, topic: str, partition: int, isolation: str, end: int) -> list[Record]:
        from aiokafka import TopicPartition

        async def read() -> list[Record]:
            consumer = await self._consumer(None, isolation)
            try:
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                check = deadline_loop(f"aiokafka: position {end} of {topic}")
                while await consumer.position(tp) < end:
                    check()
                    self._take(await consumer.getmany(tp, timeout_ms=100))
                return self.buffer
            finally:
                await consumer.stop()

        saved, self.buffer = self.buffer, []
        try:
            return self._run(read())
        finally:
            self.buffer = saved

    def close(self) -> None:
        async def stop() -> None:
            if self.member is not None:
                await self.member.stop()
            if self.producer is not None:
                await self.producer.stop()

        try:
            self._run(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


# --------------------------------------------------------------------------- the Java client


@functools.cache
def _java_classes() -> Path:
    """``TxnClient.java`` compiled once per run (javac), so each JVM skips the source
    launcher's compile (1.5 s a start here); removed at exit."""
    classes = Path(tempfile.mkdtemp(prefix="wb-txn-client-"))
    atexit.register(shutil.rmtree, classes, ignore_errors=True)
    javac = str(Path(java_executable()).with_name("javac"))
    classpath = str(jars_dir() / "*")
    cmd = [javac, "-cp", classpath, "-d", str(classes), str(JAVA_PROGRAM)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return classes


class JavaTxn:
    """``compat/java/TxnClient.java`` in its own JVM, one command a line."""

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None) -> None:
        argv = kafka_tool_command(JAVA_PROGRAM.stem, [bootstrap])
        classpath = argv.index("-cp") + 1
        argv[classpath] = f"{_java_classes()}:{argv[classpath]}"
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._answer(120.0)  # "ready": the JVM is up
        config = [] if timeout_ms is None else [f"transaction.timeout.ms={timeout_ms}"]
        self._do("producer", transactional_id, *config)

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not got or not got[0]:
            self.proc.kill()
            raise AssertionError(f"TxnClient.java gave no answer in {timeout:.0f} s")
        answer: dict[str, Any] = json.loads(got[0])
        return answer

    def _do(self, *words: object) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        answer = self._answer(TIMEOUT * 3)
        if "error" in answer:
            name = answer["error"]
            if name == "KafkaException" and answer.get("cause"):
                name = f"KafkaException({answer['cause']})"
            raise ClientError(name, answer.get("message", ""))
        return answer

    def init(self) -> None:
        self._do("init")

    def begin(self) -> None:
        self._do("begin")

    def send(self, topic: str, partition: int, key: str, value: str) -> None:
        self._do("send", topic, partition, key, value)

    def flush(self) -> list[int | str]:
        sent: list[int | str] = self._do("flush")["sent"]
        return sent

    def commit(self) -> None:
        self._do("commit")

    def abort(self) -> None:
        self._do("abort")

    def subscribe(self, group: str, topic: str) -> None:
        self._do("subscribe", group, topic)

    def poll(self, n: int) -> list[Record]:
        return [tuple(r) for r in self._do("poll", n)["records"]]  # type: ignore[misc]

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._do("seek", topic, partition, offset)

    def send_offsets(self, topic: str, partition: int, offset: int) -> None:
        self._do("offsets", topic, partition, offset)

    def read(self, topic: str, partition: int, isolation: str, end: int) -> list[Record]:
        records = self._do("read", topic, partition, isolation, end)["records"]
        return [tuple(r) for r in records]  # type: ignore[misc]

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self._do("close")
                self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
