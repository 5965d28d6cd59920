"""The broker's per-request path in process: bench row 4's requests, without sockets.

    .venv/bin/python -m bench.bench_request_path CYCLES [both|produce|fetch]

A cycle is what librdkafka sends in row 4: a one-record Produce v10 (200 bytes, acks=1), then an
incremental Fetch v16 of its fetch session (READ_COMMITTED) that the record answers at once;
`produce` or `fetch` runs only that request (the fetch then re-reads the first record). Each
request goes through what the connection does with a frame: `decode_request`, `dispatch`,
`encode_response_chunks` (the file slices released as the transport does after `sendfile`).
Prints the wall time per cycle. For instructions, which the machine's load does not move, run
it under callgrind for two cycle counts and divide the difference:

    valgrind --tool=callgrind .venv/bin/python -m bench.bench_request_path 300
    valgrind --tool=callgrind .venv/bin/python -m bench.bench_request_path 900
    # (Collected_900 - Collected_300) / 600 = instructions per cycle
"""

from __future__ import annotations

import argparse
import shutil
import struct
import tempfile
import time
import uuid

import trio

import wirebroker.handlers  # noqa: F401  (registers the handlers)
from protocol.api import decode_request, encode_request, encode_response_chunks
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.produce import ProduceRequest
from protocol.record_builder import build_record_batch
from protocol.records import SimpleRecord
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.dispatch import Later, RequestContext, dispatch
from wirebroker.handlers.fetch import FileRecords

PRODUCE_VERSION = 10  # librdkafka 2.16's
FETCH_VERSION = 16
_OFFSET_MARK = 0x1122334455667788
_EPOCH_MARK = 0x0A0B0C0D


def _header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=7, client_id="rdkafka"
    )


def produce_frame() -> bytes:
    partition = ProduceRequest.PartitionProduceData(
        index=0, records=build_record_batch([SimpleRecord(None, b"x" * 200)])
    )
    body = ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[ProduceRequest.TopicProduceData(name="lat", partition_data=[partition])],
    )
    return encode_request(_header(ProduceRequest.API_KEY, PRODUCE_VERSION), body)


def fetch_frame(topic_id: uuid.UUID, offset: int, session_id: int, epoch: int) -> bytes:
    partition = FetchRequest.FetchPartition(
        partition=0,
        current_leader_epoch=0,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    body = FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[partition])],
    )
    return encode_request(_header(FetchRequest.API_KEY, FETCH_VERSION), body)


async def handle(broker: Broker, frame: bytes | bytearray) -> object:
    """One request as the connection handles it (the frame in a writable buffer)."""
    view = memoryview(bytearray(frame))
    request = decode_request(view)
    header = request.header
    ctx = RequestContext(broker, header, "127.0.0.1", "PLAINTEXT", request_size=len(view))
    response = await dispatch(ctx, request.body)
    assert response is not None and not isinstance(response, Later), response
    encode_response_chunks(
        ResponseHeader(correlation_id=header.correlation_id),
        response,
        header.request_api_key,
        header.request_api_version,
    )
    if isinstance(response, FetchResponse):
        for topic in response.responses:
            for p in topic.partitions:
                if isinstance(p.records, FileRecords):
                    p.records.release()
    return response


async def run(broker: Broker, cycles: int, mode: str) -> float:
    """Seconds per cycle."""
    produce = produce_frame()
    await handle(broker, produce)
    partition = broker.partition("lat", 0)
    assert partition is not None
    opened = await handle(broker, fetch_frame(partition.topic_id, 0, 0, 0))
    assert isinstance(opened, FetchResponse) and opened.session_id
    # The session's fetches differ in their offset and epoch only: patched into one frame.
    template = fetch_frame(partition.topic_id, _OFFSET_MARK, opened.session_id, _EPOCH_MARK)
    at_offset = template.index(_OFFSET_MARK.to_bytes(8, "big"))
    at_epoch = template.index(_EPOCH_MARK.to_bytes(4, "big"))
    started = time.perf_counter()
    for i in range(cycles):
        if mode != "fetch":
            await handle(broker, produce)
        if mode != "produce":
            frame = bytearray(template)
            struct.pack_into(">q", frame, at_offset, i + 1 if mode == "both" else 0)
            struct.pack_into(">i", frame, at_epoch, i + 1)
            answer = await handle(broker, frame)
            assert isinstance(answer, FetchResponse) and answer.responses, answer
            assert len(answer.responses[0].partitions[0].records or b"") > 0
    return (time.perf_counter() - started) / cycles


def cycle_us(cycles: int, mode: str = "both") -> float:
    """Microseconds per cycle of `cycles`, on a broker of its own in a scratch folder (the
    side-by-side bench's reference for the host: `bench.side_by_side`)."""
    data = tempfile.mkdtemp(prefix="bench-request-path-")
    try:
        config = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data}
        broker = Broker.open(BrokerConfig.from_properties(config))
        try:
            broker.create_topic("lat", 1, 1, {})
            return trio.run(run, broker, cycles, mode) * 1e6
        finally:
            broker.close()
    finally:
        shutil.rmtree(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cycles", type=int)
    parser.add_argument("mode", nargs="?", default="both", choices=("both", "produce", "fetch"))
    args = parser.parse_args()
    print(f"{args.mode}: {cycle_us(args.cycles, args.mode):.1f} us per cycle")


if __name__ == "__main__":
    main()
