"""Every generated message at every valid version survives encode -> decode -> encode.

Hypothesis builds instances from each class's field metadata, including unknown tagged fields
in flexible versions; decoding must give equal values and re-encoding identical bytes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.schema import Message
from tests.protocol.messages_index import all_message_classes, all_message_versions
from tests.protocol.strategies import messages

CASES = all_message_versions()


def test_every_api_and_record_type_is_generated() -> None:
    names = {cls.__name__ for cls in all_message_classes()}
    for expected in [
        "ProduceRequest",
        "FetchResponse",
        "LeaderAndIsrRequest",
        "UpdateMetadataRequest",
        "StopReplicaRequest",
        "ControlledShutdownRequest",
        "WriteTxnMarkersRequest",
        "RequestHeader",
        "ResponseHeader",
        "OffsetCommitKey",
        "GroupMetadataValue",
        "TransactionLogValue",
    ]:
        assert expected in names
    assert len(CASES) > 650


@pytest.mark.parametrize(("cls", "version"), CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_roundtrip(cls: type[Message], version: int, data: st.DataObject) -> None:
    original = data.draw(messages(cls, version))
    encoded = original.encode(version)
    decoded = cls.decode(encoded, version)
    assert decoded == original
    assert decoded.encode(version) == encoded
