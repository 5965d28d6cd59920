"""Record batches built by real clients (librdkafka and the Java producer) decode with ours.

The golden Produce requests carry batches compressed with every codec by each client; our
record reader must verify their CRCs, decompress them within a bound, and return the keys and
values the capture script produced. A flipped bit anywhere under the CRC must be caught.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol.api import decode_request
from protocol.errors import CorruptRecordError
from protocol.records import RecordBatchView, iter_batches, iter_records

FRAMES_DIR = Path(__file__).resolve().parent / "golden" / "frames"
INDEX: dict[str, Any] = json.loads((FRAMES_DIR / "index.json").read_text())
PRODUCE_REQUESTS = [
    e
    for e in INDEX["frames"]
    if e["api_key"] == 0 and e["direction"] == "request" and e.get("compression")
]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _records_of(entry: dict[str, Any]) -> memoryview:
    body = decode_request((FRAMES_DIR / entry["file"]).read_bytes()).body
    return body.topic_data[0].partition_data[0].records  # type: ignore[attr-defined,no-any-return]


def test_every_client_and_codec_is_covered() -> None:
    seen = {(e["client"], e["compression"]) for e in PRODUCE_REQUESTS}
    for client in ("librdkafka", "java"):
        for codec in CODECS:
            assert (client, codec) in seen


@pytest.mark.parametrize("entry", PRODUCE_REQUESTS, ids=[e["file"] for e in PRODUCE_REQUESTS])
def test_client_batches_decode(entry: dict[str, Any]) -> None:
    batches = list(iter_batches(_records_of(entry), allow_truncated=False))
    assert batches
    values = []
    for batch in batches:
        assert isinstance(batch, RecordBatchView)
        batch.verify_crc()
        assert batch.compression == CODECS[entry["compression"]]
        records = list(iter_records(batch, max_decompressed_bytes=1 << 20))
        assert len(records) == batch.records_count
        values += [bytes(r.value) for r in records if r.value is not None]
    assert values
    assert all(entry["compression"].encode() in v for v in values)


@pytest.mark.parametrize(
    "entry", PRODUCE_REQUESTS[:4], ids=[e["file"] for e in PRODUCE_REQUESTS[:4]]
)
def test_a_flipped_bit_fails_the_crc(entry: dict[str, Any]) -> None:
    data = bytearray(_records_of(entry))
    batch_end = 12 + int.from_bytes(data[8:12], "big")
    for pos in range(21, batch_end, max(1, (batch_end - 21) // 40)):
        flipped = bytearray(data)
        flipped[pos] ^= 0x10
        view = RecordBatchView(memoryview(flipped)[:batch_end])
        with pytest.raises(CorruptRecordError):
            view.verify_crc()
