"""Codec benchmark: decode a Produce v9 request with a 16 KiB batch; encode a Fetch v12 response.

    make bench-codec

Each figure is the median of several timed runs on one core. The benchmark also checks that the
record bytes are never copied: the decoded `records` is a view into the frame, and the encoded
response carries the very records object it was given as one of its chunks.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from protocol.api import decode_request, encode_request, encode_response_chunks
from protocol.messages.fetch import FetchResponse
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.produce import ProduceRequest

BATCH = bytes(16 * 1024)


def produce_frame() -> bytes:
    body = ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="bench",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=BATCH)],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=1, client_id="bench"
    )
    return encode_request(header, body)


def fetch_body(records: memoryview) -> FetchResponse:
    return FetchResponse(
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="bench",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=0,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        records=records,
                    )
                ],
            )
        ],
    )


def rate(fn: Callable[[], object], n: int = 20_000, runs: int = 5) -> float:
    results = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        results.append(n / (time.perf_counter() - start))
    return statistics.median(results)


def main() -> None:
    frame = memoryview(produce_frame())
    decoded = decode_request(frame)
    records = decoded.body.topic_data[0].partition_data[0].records  # type: ignore[attr-defined]
    assert isinstance(records, memoryview) and records.obj is frame.obj, "records were copied"

    header = ResponseHeader(correlation_id=1)
    body = fetch_body(records)
    chunks = encode_response_chunks(header, body, 1, 12)
    assert any(c is records for c in chunks), "records were copied into the response"

    decode_rate = rate(lambda: decode_request(frame))
    encode_rate = rate(lambda: encode_response_chunks(header, fetch_body(records), 1, 12))
    encode_only = rate(lambda: encode_response_chunks(header, body, 1, 12))
    print("codec benchmark (one core, median of 5 runs of 20,000)")
    print(f"  Produce v9 request decode, 16 KiB batch : {decode_rate:>10,.0f} /s  (goal 50,000)")
    print(f"  Fetch v12 response build + encode       : {encode_rate:>10,.0f} /s  (goal 50,000)")
    print(f"  Fetch v12 response encode only          : {encode_only:>10,.0f} /s")
    print("  record bytes copied: none (identity checked)")


if __name__ == "__main__":
    main()
