"""Idempotent vs plain produce throughput, acks=all, with confluent-kafka (librdkafka).

    .venv/bin/python bench/bench_idempotence.py [--records N] [--runs R] [--size BYTES]

Starts a real broker process on a temporary data dir; each run produces the same records to
fresh topics in three modes, in rotating order: ``plain`` (acks=all, up to five requests in
flight), ``plain-1`` (the same with one request in flight) and ``idempotent``
(``enable.idempotence=true``). Prints the median records/s and MB/s of each and the ratios.

librdkafka's idempotent producer keeps only one Produce request in flight per partition,
whatever ``max.in.flight`` says (confluentinc/librdkafka#4989), so on one partition
``idempotent`` vs ``plain`` mostly measures that client limit; ``idempotent`` vs ``plain-1``
holds the client's pipelining equal and measures what the broker's producer-state checks
cost. ``--partitions 8`` spreads records over partitions (the client then pipelines across
them) for a second view. ``raw-plain`` / ``raw-idempotent`` take the client out: the same
pre-encoded Produce requests (v9, one batch of 64 records, acks=all) sent over one connection
with five in flight, differing only in producer id, epoch and sequence -- the broker's cost of
idempotence alone. The target: idempotent within 10% of plain acks=all.

Wall-clock rates swing widely on a shared machine, so each run also records the broker
process's CPU time (user + system, from /proc): broker CPU microseconds per record is the
steadier figure of what the broker spends.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from protocol.api import decode_response
from protocol.messages.produce import ProduceResponse
from protocol.record_batch import SimpleRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.wirebroker.helpers import RawClient, create_topic, produce_request  # noqa: E402

RAW_BATCH = 64
RAW_IN_FLIGHT = 5

MODES = {
    "plain": {"enable.idempotence": False, "max.in.flight.requests.per.connection": 5},
    "plain-1": {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1},
    "idempotent": {"enable.idempotence": True, "max.in.flight.requests.per.connection": 5},
}


def produce(
    bootstrap: str, topic: str, count: int, record: bytes, mode: str, partitions: int
) -> float:
    """Records per second."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            **MODES[mode],
            "linger.ms": 5,
            "batch.size": 65536,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, record, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - start
    if remaining:
        raise SystemExit(f"{remaining} records not delivered")
    return count / elapsed


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_raw(bootstrap: str, topic: str, count: int, record: bytes, idempotent: bool) -> float:
    """Records per second of pre-encoded Produce requests, five in flight."""
    records = [SimpleRecord(None, record, (), 1_700_000_000_000 + i) for i in range(RAW_BATCH)]
    batches = count // RAW_BATCH
    with RawClient(bootstrap, timeout=60) as client:
        frames = []
        for i in range(batches):
            producer = {"producer_id": 7, "producer_epoch": 0, "base_sequence": i * RAW_BATCH}
            request = produce_request(topic, 0, records, **(producer if idempotent else {}))
            frames.append(client.encode(request, 9, i))
        start = time.perf_counter()
        sent = received = 0
        while received < batches:
            while sent < batches and sent - received < RAW_IN_FLIGHT:
                client.send_raw(frames[sent])
                sent += 1
            last = client.receive_frame()
            received += 1
        elapsed = time.perf_counter() - start
    response = decode_response(last, ProduceResponse.API_KEY, 9).body
    assert isinstance(response, ProduceResponse)
    partition = response.responses[0].partition_responses[0]
    if partition.error_code or partition.base_offset != (batches - 1) * RAW_BATCH:
        raise SystemExit(f"unexpected last response {partition}")
    return batches * RAW_BATCH / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    record = b"x" * args.size
    modes = [*MODES, "raw-plain", "raw-idempotent"]
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp))
        broker.start()
        try:
            for run in range(args.runs):
                for k in range(len(modes)):
                    mode = modes[(run + k) % len(modes)]
                    topic = f"bench-{run}-{mode}"
                    create_topic(broker.bootstrap, topic, args.partitions)
                    assert broker.proc is not None
                    cpu_before = cpu_seconds(broker.proc.pid)
                    if mode.startswith("raw-"):
                        idempotent = mode == "raw-idempotent"
                        rate = produce_raw(
                            broker.bootstrap, topic, args.records, record, idempotent
                        )
                    else:
                        rate = produce(
                            broker.bootstrap, topic, args.records, record, mode, args.partitions
                        )
                    used = cpu_seconds(broker.proc.pid) - cpu_before
                    results[mode].append(rate)
                    cpu[mode].append(used / args.records * 1e6)
                    print(
                        f"run {run}: {mode:14} {rate:10.0f} records/s "
                        f"{rate * args.size / 1e6:7.1f} MB/s  broker CPU "
                        f"{cpu[mode][-1]:5.2f} us/record",
                        flush=True,
                    )
        finally:
            broker.stop()
    medians = {mode: statistics.median(rates) for mode, rates in results.items()}
    print(
        f"\nmedian of {args.runs} runs, {args.records} records of {args.size} B, acks=all, "
        f"{args.partitions} partition(s):"
    )
    cpu_medians = {mode: statistics.median(values) for mode, values in cpu.items()}
    for mode, rate in medians.items():
        print(
            f"  {mode:14} {rate:10.0f} records/s {rate * args.size / 1e6:7.1f} MB/s  "
            f"broker CPU {cpu_medians[mode]:5.2f} us/record"
        )
    idem = medians["idempotent"]
    print(f"  idempotent / plain   = {idem / medians['plain']:.3f}")
    print(f"  idempotent / plain-1 = {idem / medians['plain-1']:.3f}")
    raw = medians["raw-idempotent"] / medians["raw-plain"]
    print(f"  raw-idempotent / raw-plain = {raw:.3f}")
    cpu_ratio = cpu_medians["raw-idempotent"] / cpu_medians["raw-plain"]
    print(f"  broker CPU per record, raw-idempotent / raw-plain = {cpu_ratio:.3f}")


if __name__ == "__main__":
    main()
