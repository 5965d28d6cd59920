"""The embedded broker's SCRAM credentials (`scram-credentials.json`) and producer-id blocks
(`wirebroker-producer-ids.json`) are written off the event loop, in order, before the answer,
and a failed write is answered with an error and changes nothing.

- An in-process broker whose writes of these files are held in their worker thread: Metadata
  is answered meanwhile; an AlterUserScramCredentials (confluent-kafka's AdminClient) is not
  answered, nor its user in effect, until its write lands, and a second one waits for it (its
  write holds both users: never an older state over a newer); InitProducerIds arriving at a
  block boundary all wait for the one reservation, then get distinct ids of the reserved block.
- A full disk (a 16 MiB tmpfs, root only): AlterUserScramCredentials and the InitProducerId
  that needs a new block are answered UNKNOWN_SERVER_ERROR (as Kafka answers a failed ZooKeeper
  write) and logged, the broker stays up, the user exists neither now nor after a kill -9, and
  once space is freed both succeed.
(Durability across a kill -9 after an answer: test_sasl.py and test_idempotence.py.)
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

import wirebroker.json_file
from protocol.errors import ErrorCode
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from protocol.messages.metadata import MetadataRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    assert_refused_for_a_full_disk,
    fill,
    init_producer_id,
    server_jaas,
)
from wirebroker.config import BrokerConfig
from wirebroker.producer_ids import BLOCK_SIZE
from wirebroker.producer_ids import FILE_NAME as PRODUCER_IDS_FILE
from wirebroker.sasl.credentials import FILE_NAME as CREDENTIALS_FILE
from wirebroker.server import serve_broker

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
PASSWORD = "pw-6b1e"
ITERATIONS = 4096


def _alter(bootstrap: str, user: str) -> tuple[int, str | None]:
    """Give `user` a SCRAM-SHA-256 credential with confluent-kafka: (0, None) when done, else
    its KafkaError's code and message. (librdkafka 2.16 cannot report a user's
    UNKNOWN_SERVER_ERROR, -1, its own "unknown": the future never completes. `_alter_raw`.)"""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, ITERATIONS)
    upsertion = UserScramCredentialUpsertion(user, info, PASSWORD.encode())
    try:
        admin.alter_user_scram_credentials([upsertion])[user].result(TIMEOUT)
    except KafkaException as e:
        return e.args[0].code(), e.args[0].str()
    return ErrorCode.NONE, None


def _alter_raw(bootstrap: str, user: str) -> tuple[int, str | None]:
    """`_alter` over our codec: the user's error code and message."""
    salt = os.urandom(16)
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user,
        mechanism=1,  # SCRAM-SHA-256
        iterations=ITERATIONS,
        salt=salt,
        salted_password=hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), salt, ITERATIONS),
    )
    request = AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsertion])
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(request, 0).results
    return result.error_code, result.error_message


def _described(bootstrap: str, user: str) -> int:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        request = DescribeUserScramCredentialsRequest(
            users=[DescribeUserScramCredentialsRequest.UserName(name=user)]
        )
        (result,) = client.request(request, 0).results
    return result.error_code


def _metadata_answered(bootstrap: str) -> bool:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        return bool(client.request(MetadataRequest(topics=[]), 12).brokers)


class _HeldWrites:
    """Wraps `json_file.write_json_atomically`: the writes of the file `name` are recorded
    (thread, contents) and held until `release` is set; the others go through."""

    def __init__(self, name: str) -> None:
        self.write = wirebroker.json_file.write_json_atomically
        self.name = name
        self.writes: list[tuple[int, Any]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, path: Path, obj: Any, **kwargs: Any) -> None:
        if path.name == self.name:
            self.writes.append((threading.get_ident(), obj))
            self.started.set()
            assert self.release.wait(TIMEOUT)
        self.write(path, obj, **kwargs)


class _Arrivals:
    """Counts calls of an async function (wrapped), so a test on the broker's loop can await the
    n-th arrival of a request there."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> None:
        self.count = 0
        self.event = trio.Event()
        original = getattr(target, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            self.event.set()
            return await original(*args, **kwargs)

        monkeypatch.setattr(target, name, counted)

    async def wait_for(self, count: int) -> None:
        while self.count < count:
            self.event = trio.Event()
            await self.event.wait()


Ask = Callable[[str, Callable[[], Any]], Any]
#: A test's part on the broker's loop: (broker, bootstrap, ask, answers so far).
Scenario = Callable[[Any, str, Ask, dict[str, Any]], Any]


def _run_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: _HeldWrites, scenario: Scenario
) -> dict[str, Any]:
    """Serve an in-process broker with `held` in place and run `scenario` on its loop
    (`ask(what, call)` runs a blocking client call in a thread, its answer kept in `answers`
    under `what`), then stop; the answers."""
    monkeypatch.setattr(wirebroker.json_file, "write_json_atomically", held)
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )
    answers: dict[str, Any] = {}

    async def ask(what: str, call: Callable[[], Any]) -> None:
        answers[what] = await trio.to_thread.run_sync(call)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            try:
                with trio.fail_after(TIMEOUT):
                    await scenario(running.broker, running.bootstrap_servers, ask, answers)
            finally:
                held.release.set()
            nursery.cancel_scope.cancel()

    trio.run(main)
    return answers


def test_credentials_are_saved_off_the_loop_in_order_before_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldWrites(CREDENTIALS_FILE)

    async def scenario(broker: Any, bootstrap: str, ask: Ask, answers: dict[str, Any]) -> None:
        lock = _Arrivals(monkeypatch, broker.scram_credentials.lock, "acquire")
        async with trio.open_nursery() as asking:
            asking.start_soon(ask, "carol", partial(_alter, bootstrap, "carol"))
            assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
            # The write is held: the loop answers others meanwhile ...
            assert await trio.to_thread.run_sync(_metadata_answered, bootstrap)
            # ... the change is neither answered nor in effect until saved ...
            described = await trio.to_thread.run_sync(_described, bootstrap, "carol")
            assert described == ErrorCode.RESOURCE_NOT_FOUND
            assert "carol" not in answers
            # ... and the next change waits for it.
            asking.start_soon(ask, "dan", partial(_alter, bootstrap, "dan"))
            await lock.wait_for(2)
            assert len(held.writes) == 1
            held.release.set()

    answers = _run_held(tmp_path, monkeypatch, held, scenario)
    assert answers == {"carol": (ErrorCode.NONE, None), "dan": (ErrorCode.NONE, None)}
    assert [sorted(obj["users"]) for _thread, obj in held.writes] == [["carol"], ["carol", "dan"]]
    assert threading.get_ident() not in {thread for thread, _obj in held.writes}


def test_producer_ids_wait_for_their_block_written_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldWrites(PRODUCER_IDS_FILE)
    requests = 3

    async def scenario(broker: Any, bootstrap: str, ask: Ask, answers: dict[str, Any]) -> None:
        arrivals = _Arrivals(monkeypatch, broker.producer_ids, "next_producer_id")
        async with trio.open_nursery() as asking:
            for i in range(requests):  # a fresh broker: the first needs a block
                asking.start_soon(ask, f"init {i}", partial(init_producer_id, bootstrap))
            await arrivals.wait_for(requests)
            assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
            assert await trio.to_thread.run_sync(_metadata_answered, bootstrap)
            assert not answers  # every one waits for the block's reservation
            held.release.set()

    answers = _run_held(tmp_path, monkeypatch, held, scenario)
    assert {a.error_code for a in answers.values()} == {ErrorCode.NONE}
    assert sorted(a.producer_id for a in answers.values()) == list(range(requests))
    assert [obj["block_end"] for _thread, obj in held.writes] == [BLOCK_SIZE]  # reserved once
    assert threading.get_ident() not in {thread for thread, _obj in held.writes}


def test_a_full_disk_refuses_the_change_and_the_broker_stays_up(disk: Path) -> None:
    broker = BrokerProcess(
        disk / "data",
        {
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            **server_jaas("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        },
        extra_listeners=("SASL_PLAINTEXT",),
    )
    broker.start()
    try:
        fill(disk / "filler")
        since = len(broker.log)
        assert_refused_for_a_full_disk(*_alter_raw(broker.bootstrap, "erin"), disk)
        assert broker.wait_for_log("cannot write the SCRAM credentials", since=since)
        assert _described(broker.bootstrap, "erin") == ErrorCode.RESOURCE_NOT_FOUND
        # A fresh broker's first InitProducerId needs a block: none can be reserved.
        refused = init_producer_id(broker.bootstrap)
        assert (refused.error_code, refused.producer_id) == (ErrorCode.UNKNOWN_SERVER_ERROR, -1)
        assert broker.wait_for_log("cannot reserve producer ids", since=since)
        assert broker.alive()
        (disk / "filler").unlink()
        broker.restart(clean=False)
        # The refused credential did not land: erin is unknown after the restart too.
        assert _described(broker.bootstrap, "erin") == ErrorCode.RESOURCE_NOT_FOUND
        sasl = f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}"
        with RawClient(sasl) as client, pytest.raises(ConnectionError):
            client.login_scram("SCRAM-SHA-256", "erin", PASSWORD)
        assert _alter(broker.bootstrap, "erin") == (ErrorCode.NONE, None)
        with RawClient(sasl) as client:
            client.login_scram("SCRAM-SHA-256", "erin", PASSWORD)
        granted = init_producer_id(broker.bootstrap)
        assert (granted.error_code, granted.producer_id) == (ErrorCode.NONE, 0)
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)
