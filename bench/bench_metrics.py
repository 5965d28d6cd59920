"""What the metrics cost the produce path: in-process, counters on against counters off.

    .venv/bin/python bench/bench_metrics.py [--requests N] [--rounds R]

Opens a broker in this process (a temporary data dir, no sockets) and hands acks=1 Produce
requests straight to the dispatcher, the way a connection does, in two shapes: one record of
100 bytes per request (the worst case: the per-request cost is all there is) and 16 records of
1 KiB (closer to the broker benchmark's row 1, a batching producer). Each round runs both
modes on the same broker and log, alternating which goes first: ``on`` (its `BrokerStats`, as
served) and ``off`` (its `request_done` and `produced` shadowed by pass-throughs: no counting,
no timing). Prints the best round's CPU microseconds per request of each (CPU time of this
process, the least disturbed by other load on a shared machine) and the ratio of throughputs
(on / off; the issue's goal is at least 0.97), and the cost of the counting alone (the calls a
Produce request makes, in a tight loop), the steadiest figure. Decoding and the socket are
left out, which makes the ratio a pessimistic one: they cost the same in both modes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import wirebroker.handlers  # noqa: E402, F401  (registers every API)
from protocol.messages.headers import RequestHeader  # noqa: E402
from protocol.messages.produce import ProduceRequest  # noqa: E402
from protocol.record_batch import SimpleRecord  # noqa: E402
from protocol.record_builder import build_record_batch  # noqa: E402
from wirebroker.broker import Broker  # noqa: E402
from wirebroker.config import BrokerConfig  # noqa: E402
from wirebroker.dispatch import RequestContext, dispatch  # noqa: E402
from wirebroker.metrics import BrokerStats  # noqa: E402

SHAPES = {"1 x 100 B": (1, 100), "16 x 1 KiB": (16, 1024)}


def produce_request(topic: str, records: int, size: int) -> ProduceRequest:
    batch = build_record_batch([SimpleRecord(None, b"x" * size) for _ in range(records)])
    data = ProduceRequest.PartitionProduceData(index=0, records=batch)
    return ProduceRequest(
        acks=1,
        timeout_ms=10_000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )


def set_counting(stats: BrokerStats, on: bool) -> None:
    """Counting on: the class's methods; off: pass-throughs shadowing them on the instance."""
    if on:
        vars(stats).pop("request_done", None)
        vars(stats).pop("produced", None)
        return

    def request_done(header: Any, body: Any, started: float, response: Any, error: int = 0) -> Any:
        return response

    stats.request_done = request_done  # type: ignore[method-assign]
    stats.produced = lambda topic, records, size: None  # type: ignore[method-assign]


async def per_request_us(broker: Broker, request: ProduceRequest, n: int) -> float:
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1)
    ctx = RequestContext(broker, header, "127.0.0.1", "PLAINTEXT")
    start = time.process_time()
    for _ in range(n):
        await dispatch(ctx, request)
    return (time.process_time() - start) / n * 1e6


def counting_us(request: ProduceRequest, n: int) -> float:
    """The counting alone: `request_done` and `produced` as one Produce request calls them."""
    stats = BrokerStats()
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1)
    response = object()
    start = time.perf_counter()
    for _ in range(n):
        stats.produced("bench", 16, 16_384)
        stats.request_done(header, request, time.perf_counter(), response)  # type: ignore[arg-type]
    return (time.perf_counter() - start) / n * 1e6


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as data:
        broker = Broker.open(BrokerConfig.from_properties({"log.dirs": data}))
        try:
            for shape, (records, size) in SHAPES.items():
                broker.create_topic(_topic(shape), 1, 1, {})
                request = produce_request(_topic(shape), records, size)
                n = args.requests if records == 1 else args.requests // 8
                times: dict[bool, list[float]] = {True: [], False: []}
                for r in range(args.rounds):
                    for on in (True, False) if r % 2 == 0 else (False, True):
                        set_counting(broker.stats, on)
                        times[on].append(await per_request_us(broker, request, n))
                on, off = min(times[True]), min(times[False])
                print(
                    f"{shape:>11}: on {on:6.2f} us/request, off {off:6.2f} us/request, "
                    f"throughput on/off {off / on:.3f}",
                    flush=True,
                )
            alone = min(counting_us(request, args.requests) for _ in range(5))
            print(f"counting alone: {alone:.2f} us per Produce request", flush=True)
        finally:
            broker.close()


def _topic(shape: str) -> str:
    return "bench-" + shape.replace(" ", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5_000, help="per round and mode")
    parser.add_argument("--rounds", type=int, default=11)
    trio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
