"""Fuzz: arbitrary and mutated frames either decode or raise ProtocolError, with bounded memory."""

from __future__ import annotations

import contextlib
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.api import decode_request, decode_response
from protocol.errors import ProtocolError
from protocol.messages import APIS

GOLDEN = sorted((Path(__file__).parent / "golden" / "frames").glob("*request*.bin"))
SEEDS = [p.read_bytes() for p in GOLDEN] or [bytes.fromhex("001200030000000100036162630000")]
API_KEYS = sorted(APIS)


def try_request(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(frame)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_arbitrary_request_frames(frame: bytes) -> None:
    try_request(frame)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(API_KEYS), st.integers(0, 20), st.binary(max_size=256))
def test_arbitrary_bodies_for_every_api(api_key: int, version: int, body: bytes) -> None:
    info = APIS[api_key]
    header = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x07\xff\xff"
    try_request(header + (b"\x00" if info.request_header_version(version) == 2 else b"") + body)
    if info.min_version <= version <= info.max_version:
        with contextlib.suppress(ProtocolError):
            decode_response(b"\x00\x00\x00\x07" + body, api_key, version)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del data[pos:]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_real_frames(frame: bytes) -> None:
    try_request(frame)


def test_lying_counts_allocate_nothing_large() -> None:
    # A Produce v3 request claiming 2**31-1 topics, and one claiming a 2 GiB records field.
    header = bytes.fromhex("0000000300000001ffff")
    lying_topics = header + bytes.fromhex("ffff0001000075307fffffff") + b"\x00" * 32
    lying_records = header + bytes.fromhex("ffff0001000075300000000100017400000001000000007ffffff0")
    tracemalloc.start()
    try:
        for frame in (lying_topics, lying_records):
            try_request(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024
