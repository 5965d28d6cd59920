"""The transaction scenarios, shared by ``compat/`` (Kafka, then wirebroker, compared) and
``tests/`` (wirebroker alone, against the observations Kafka 3.9 gave: ``compat/golden/``).

A scenario runs through one client (``compat/txn_clients.py``) against one broker and returns
a plain, comparable observation:

- ``interleaved``: committed and aborted transactions in turn, then one left open: what the
  client's read_committed and read_uncommitted consumers hand the application, the last stable
  offset, the aborted transactions a read_committed Fetch lists, and what each offset of the
  log holds (transactional data, a COMMIT or an ABORT marker).
- ``consume_transform_produce``: a copier that reads a topic as a group member, writes each
  record transformed, and commits the group's offsets inside the transaction: the group's
  offsets before and after each commit or abort (with ``require_stable``: pending), the output.
- ``zombie_fencing``: three instances of one transactional.id, each fencing the one before:
  what the zombies' commit and produce get, and what the log keeps.

Records are ``(offset, key, value)`` as the application got them: control records never
appear, and the offsets show it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat.raw import create_topic
from compat.test_differential import differences
from compat.txn_clients import TxnClient, deadline_loop, error_of, open_client
from protocol.errors import ErrorCode
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.record_batch import SimpleRecord
from protocol.records import iter_batches, iter_records
from tests.wirebroker.helpers import RawClient, fetch_raw, list_offset, produce_request

#: One broker's settings for the scenarios (Kafka's test broker has them too: compat's
#: kafka_properties): a one-partition transaction log of one replica, groups that start at once.
BROKER_PROPERTIES = {
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
}


# --------------------------------------------------------------------------- the broker's view


def log_layout(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, str, str]]:
    """What each offset holds: ``data`` (not transactional) or ``txn`` with its value, or a
    ``COMMIT`` or ``ABORT`` marker with its coordinator epoch. Fetched until the high
    watermark: one Fetch may stop short of it (Kafka's may, right after a marker)."""
    out: list[tuple[int, str, str]] = []
    offset = 0
    check = deadline_loop(f"{topic}-{partition}: reading up to the high watermark")
    while True:
        p = _fetch(bootstrap, topic, partition, isolation=0, offset=offset)
        for batch in iter_batches(bytes(p.records or b"")):
            for r in iter_records(batch):
                if r.offset < offset:
                    continue
                if batch.is_control:
                    kind = {0: "ABORT", 1: "COMMIT"}.get(int.from_bytes(bytes(r.key)[2:4]), "?")
                    detail = f"coordinator epoch {int.from_bytes(bytes(r.value)[2:6])}"
                else:
                    kind = "txn" if batch.is_transactional else "data"
                    detail = bytes(r.value or b"").decode(errors="backslashreplace")
                out.append((r.offset, kind, detail))
                offset = r.offset + 1
        if offset >= p.high_watermark:
            return out
        check()


def stable_offsets(bootstrap: str, topic: str, partition: int = 0) -> dict[str, Any]:
    """High watermark and last stable offset (Fetch), read_committed ListOffsets latest, and
    the first offsets of the aborted transactions a read_committed Fetch from 0 lists."""
    p = _fetch(bootstrap, topic, partition, isolation=1)
    return {
        "high_watermark": p.high_watermark,
        "last_stable_offset": p.last_stable_offset,
        "list_offsets_read_committed": list_offset(bootstrap, topic, partition, -1, 1),
        "aborted": sorted(a.first_offset for a in p.aborted_transactions or ()),
    }


def _fetch(bootstrap: str, topic: str, partition: int, isolation: int, offset: int = 0) -> Any:
    p = fetch_raw(bootstrap, topic, partition, offset, isolation_level=isolation)
    assert p.error_code == ErrorCode.NONE, p.error_code
    return p


def wait_stable(bootstrap: str, topic: str, partition: int = 0) -> None:
    """Until no transaction is open on the partition (its markers are written: they go out
    after EndTxn is answered)."""
    check = deadline_loop(f"{topic}-{partition}: last stable offset to reach the high watermark")
    while True:
        s = stable_offsets(bootstrap, topic, partition)
        if s["last_stable_offset"] == s["high_watermark"]:
            return
        check()
        time.sleep(0.05)


def group_offset(bootstrap: str, group: str, topic: str, partition: int = 0) -> dict[str, int]:
    """OffsetFetch v8 of one partition: the committed offset, and the error code and offset
    with ``require_stable`` (UNSTABLE_OFFSET_COMMIT while a transaction's offsets are pending).
    """
    out = {}
    for stable in (False, True):
        request = OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[partition]
                        )
                    ],
                )
            ],
            require_stable=stable,
        )
        with RawClient(bootstrap) as client:
            (g,) = client.request(request, 8).groups
        (p,) = g.topics[0].partitions
        if stable:
            out["require_stable_error"] = p.error_code or g.error_code
            out["require_stable_offset"] = p.committed_offset
        else:
            out["committed"] = p.committed_offset
    return out


def wait_group_stable(bootstrap: str, group: str, topic: str) -> int:
    """Until the group's offsets for the partition are no longer pending (the transaction's
    marker reached ``__consumer_offsets``): then its committed offset."""
    check = deadline_loop(f"group {group}: offsets of {topic} still pending")
    while (got := group_offset(bootstrap, group, topic))["require_stable_error"]:
        check()
        time.sleep(0.05)
    return got["require_stable_offset"]


def views(client: TxnClient, bootstrap: str, topic: str) -> dict[str, Any]:
    """What the client's consumers get at each isolation level, and the broker's offsets."""
    offsets = stable_offsets(bootstrap, topic)
    return {
        "offsets": offsets,
        "read_committed": client.read(topic, 0, "read_committed", offsets["last_stable_offset"]),
        "read_uncommitted": client.read(topic, 0, "read_uncommitted", offsets["high_watermark"]),
        "log": log_layout(bootstrap, topic),
    }


# --------------------------------------------------------------------------- the scenarios


def interleaved(client: str, bootstrap: str, topic: str) -> dict[str, Any]:
    """Commit, abort, commit, abort; then one left open (what the LSO holds back); commit."""
    create_topic(bootstrap, topic)
    c = open_client(client, bootstrap, f"{topic}-txn")
    try:
        c.init()
        sent = []
        for key, values, finish in (
            ("a", ["a0", "a1"], c.commit),
            ("b", ["b0", "b1"], c.abort),
            ("c", ["c0"], c.commit),
            ("d", ["d0"], c.abort),
        ):
            c.begin()
            for v in values:
                c.send(topic, 0, key, v)
            sent.append(c.flush())
            finish()
        c.begin()
        c.send(topic, 0, "e", "e0")
        sent.append(c.flush())
        open_view = views(c, bootstrap, topic)
        c.commit()
        wait_stable(bootstrap, topic)
        return {"sent": sent, "open": open_view, "committed": views(c, bootstrap, topic)}
    finally:
        c.close()


INPUT = [(f"k{i}", f"v{i}") for i in range(6)]


def consume_transform_produce(client: str, bootstrap: str, stem: str) -> dict[str, Any]:
    """Read ``INPUT`` as a group member, write it upper-cased, offsets in the transaction:
    3 records committed, 2 aborted (and read again from the committed offset), 3 committed."""
    source, sink, group = f"{stem}-in", f"{stem}-out", f"{stem}-group"
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    records = [SimpleRecord(k.encode(), v.encode(), (), 1_700_000_000_000) for k, v in INPUT]
    with RawClient(bootstrap) as raw:
        (t,) = raw.request(produce_request(source, 0, records), 9).responses
        assert t.partition_responses[0].error_code == ErrorCode.NONE
    c = open_client(client, bootstrap, f"{stem}-txn")
    try:
        c.init()
        c.subscribe(group, source)
        steps = []
        for n, finish in ((3, c.commit), (2, c.abort), (3, c.commit)):
            c.begin()
            polled = c.poll(n)
            for _offset, key, value in polled:
                assert key is not None
                c.send(sink, 0, key, value.upper())
            sent = c.flush()
            c.send_offsets(source, 0, polled[-1][0] + 1)
            pending = group_offset(bootstrap, group, source)
            finish()
            after = wait_group_stable(bootstrap, group, source)
            steps.append(
                {
                    "read": [r[0] for r in polled],
                    "sent": sent,
                    "pending": pending,
                    "after": after,
                }
            )
            if finish == c.abort:
                c.seek(source, 0, after)
        wait_stable(bootstrap, sink)
        return {"steps": steps, "output": views(c, bootstrap, sink)}
    finally:
        c.close()


def zombie_fencing(client: str, bootstrap: str, topic: str) -> dict[str, Any]:
    """Three instances with one transactional.id, each fencing the one before mid-transaction
    (whose open transaction is aborted): the first zombie only commits (EndTxn with the old
    epoch); the second, once the third committed, produces (Produce with the old epoch), then
    commits."""
    create_topic(bootstrap, topic)
    txn_id = f"{topic}-txn"
    instances: list[TxnClient] = []

    def instance(key: str) -> tuple[TxnClient, list[int | str]]:
        """A new instance (fencing the last), its transaction open with one record sent."""
        instances.append(open_client(client, bootstrap, txn_id))
        c = instances[-1]
        c.init()
        c.begin()
        c.send(topic, 0, key, f"{key}0")
        return c, c.flush()

    try:
        first, first_sent = instance("a")
        second, second_sent = instance("b")
        first_commit = error_of(first.commit)
        third, third_sent = instance("c")
        # The third commits before the zombie tries again: kafka-python answers the zombie's
        # INVALID_PRODUCER_EPOCH with a KIP-360 epoch bump, which Kafka grants when the
        # zombie's epoch is the one just before (so it could abort the third's transaction).
        third_commit = error_of(third.commit)
        second.send(topic, 0, "b", "b1")
        second_produce = second.flush()
        second_commit = error_of(second.commit)
        wait_stable(bootstrap, topic)
        return {
            "sent": [first_sent, second_sent, third_sent],
            "zombie commit": first_commit,
            "zombie produce": second_produce,
            "zombie produce, then commit": second_commit,
            "last instance's commit": third_commit,
            "views": views(third, bootstrap, topic),
        }
    finally:
        for c in instances:
            c.close()


SCENARIOS: dict[str, Callable[[str, str, str], dict[str, Any]]] = {
    "interleaved": interleaved,
    "consume_transform_produce": consume_transform_produce,
    "zombie_fencing": zombie_fencing,
}

#: Observations taken on Kafka 3.9, which ``tests/`` holds wirebroker to: one JSON file per
#: scenario module in ``compat/golden/``. The compat suite checks Kafka still gives them;
#: ``WIREBROKER_TXN_GOLDEN=write`` (on a compat run) rewrites them from Kafka's.
GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDEN_ENV = "WIREBROKER_TXN_GOLDEN"


def observe(scenario: str, client: str, bootstrap: str) -> Any:
    """Run one scenario; its observation as JSON data (tuples become lists)."""
    stem = f"{scenario.replace('_', '-')}-{client}"
    return json.loads(json.dumps(SCENARIOS[scenario](client, bootstrap, stem)))


def golden(name: str, *keys: str) -> Any:
    """The observation Kafka gave, from ``compat/golden/<name>.json``."""
    value = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    for key in keys:
        value = value[key]
    return value


def check_golden(name: str, keys: tuple[str, ...], observation: Any) -> None:
    """Kafka's observation is the golden one (with ``WIREBROKER_TXN_GOLDEN=write``: becomes it)."""
    path = GOLDEN_DIR / f"{name}.json"
    if os.environ.get(GOLDEN_ENV) == "write":
        table = json.loads(path.read_text()) if path.exists() else {}
        here = table
        for key in keys[:-1]:
            here = here.setdefault(key, {})
        here[keys[-1]] = observation
        text = json.dumps(table, indent=1, sort_keys=True)
        # Innermost lists (a record, an offset's kind) on one line each.
        text = re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m[0])), text)
        path.write_text(text + "\n")
        return
    want = golden(name, *keys)
    assert observation == want, (
        f"Kafka no longer gives {path.name}'s observation of {'/'.join(keys)} "
        f"(if Kafka is right, rerun the compat test on Kafka with {GOLDEN_ENV}=write):\n"
        + "\n".join(differences(observation, want)).replace("wirebroker", "now")
    )
