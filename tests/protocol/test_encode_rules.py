"""Field semantics on encode: versions, nullability, ignorable fields, tagged-field defaults."""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import EncodeError, ErrorCode
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.group_coordinator.offset_commit import OffsetCommitValue
from protocol.messages.headers import RequestHeader
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.produce import ProduceRequest


def test_non_default_value_in_a_missing_field_raises() -> None:
    with pytest.raises(EncodeError, match="transactional_id"):
        ProduceRequest(transactional_id="tx").encode(2)
    assert ProduceRequest(transactional_id=None).encode(2)  # the default is fine


def test_ignorable_missing_field_is_dropped() -> None:
    value = OffsetCommitValue(offset=5, leader_epoch=7, metadata="m", commit_timestamp=1)
    decoded = OffsetCommitValue.decode(value.encode(1), 1)
    assert decoded.leader_epoch == -1  # v1 has no leader epoch; the field was ignorable
    assert OffsetCommitValue.decode(value.encode(3), 3).leader_epoch == 7


def test_null_in_a_non_nullable_version_raises() -> None:
    # MetadataRequest.topics is nullable only from v1: null means "all topics" there.
    assert MetadataRequest.decode(MetadataRequest(topics=None).encode(1), 1).topics is None
    with pytest.raises(EncodeError):
        MetadataRequest(topics=None).encode(0)
    # A null string where none is allowed: refused when written (a message compiled with mypyc,
    # ProduceRequest's, refuses it when made, by the field's declared type).
    with pytest.raises(EncodeError):
        AddOffsetsToTxnRequest(transactional_id=None).encode(0)  # type: ignore[arg-type]


def test_out_of_range_values_raise() -> None:
    with pytest.raises(EncodeError):
        ProduceRequest(acks=70000).encode(3)


def test_versions_outside_the_valid_range_raise() -> None:
    with pytest.raises(EncodeError):
        ProduceRequest().encode(12)


def test_unknown_tags_cannot_be_written_before_flexible_versions() -> None:
    request = MetadataRequest(unknown_tagged_fields=[(5, b"x")])
    assert MetadataRequest.decode(request.encode(9), 9) == request
    with pytest.raises(EncodeError):
        request.encode(8)


def test_tagged_fields_are_written_only_when_not_default() -> None:
    plain = FetchRequest(replica_id=-1, max_wait_ms=500)
    tagged = FetchRequest(replica_id=-1, max_wait_ms=500, cluster_id="cluster")
    assert len(tagged.encode(12)) > len(plain.encode(12))
    assert FetchRequest.decode(tagged.encode(12), 12).cluster_id == "cluster"
    assert FetchRequest.decode(plain.encode(12), 12).cluster_id is None


def test_spec_defaults() -> None:
    assert FetchRequest().max_bytes == 0x7FFFFFFF
    assert MetadataResponse.MetadataResponseTopic().topic_authorized_operations == -(2**31)
    assert MetadataResponse.MetadataResponseTopic().topic_id == uuid.UUID(int=0)
    assert RequestHeader().client_id == ""


def test_error_codes() -> None:
    assert ErrorCode(35) is ErrorCode.UNSUPPORTED_VERSION
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable
    assert not ErrorCode.MESSAGE_TOO_LARGE.retriable
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert len(ErrorCode) > 120
