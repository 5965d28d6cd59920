"""Cross-check of our codec against kafka-python's, an independent implementation.

kafka-python (a test dependency) ships its own encoders and decoders in two layers: the
JSON layer (classes built from Kafka's message specs, a Kafka 4.x snapshot) and the legacy
layer (hand-written per-version `SCHEMA`s). `kafka_python_map` enumerates every request and
response class of both, and every version each one accepts, by introspection.

For every such (class, version) that has a counterpart here with the same wire layout (the
layout itself is asserted, field by field), with values that Hypothesis generates:

* kafka-python -> ours: the values, put into a kafka-python object and encoded by
  kafka-python, decode with our class to exactly those values, and our re-encode is
  byte-identical to kafka-python's bytes;
* ours -> kafka-python: the values, encoded by our class, decode with kafka-python to exactly
  those values, and kafka-python's re-encode is byte-identical to ours.

Where kafka-python merely *represents* a value differently (the zero UUID as None, a bit set
for authorized-operations, an absent tagged struct as None, ...) the conversion in
`kafka_python_map` normalises it with the reason written next to it; bytes are never
normalised. What cannot be compared at all is listed in `NOT_COMPARABLE` with the reason, and
that list must stay exactly what the introspection finds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from protocol.schema import Message
from tests.protocol import kafka_python_map as kpm
from tests.protocol.kafka_python_map import KpCase

_NEWER_THAN_39 = (
    "a version newer than Kafka 3.9 (kafka-python's specs are a Kafka 4.x snapshot); "
    "wirebroker implements 3.9, so there is no class of ours at this version"
)

#: Every kafka-python (class, version) that cannot be compared, with the reason. Must equal
#: what the introspection finds: a kafka-python upgrade that adds (or fixes) one shows up here.
NOT_COMPARABLE: dict[str, str] = {
    "json:ProduceRequest:v12": _NEWER_THAN_39,
    "json:ProduceRequest:v13": _NEWER_THAN_39,
    "json:ProduceResponse:v12": _NEWER_THAN_39,
    "json:ProduceResponse:v13": _NEWER_THAN_39,
    "json:FetchRequest:v18": _NEWER_THAN_39,
    "json:FetchResponse:v18": _NEWER_THAN_39,
    "json:ListOffsetsRequest:v10": _NEWER_THAN_39,
    "json:ListOffsetsRequest:v11": _NEWER_THAN_39,
    "json:ListOffsetsResponse:v10": _NEWER_THAN_39,
    "json:ListOffsetsResponse:v11": _NEWER_THAN_39,
    "json:MetadataRequest:v13": _NEWER_THAN_39,
    "json:MetadataResponse:v13": _NEWER_THAN_39,
    "json:OffsetCommitRequest:v10": _NEWER_THAN_39,
    "json:OffsetCommitResponse:v10": _NEWER_THAN_39,
    "json:OffsetFetchRequest:v10": _NEWER_THAN_39,
    "json:OffsetFetchResponse:v10": _NEWER_THAN_39,
    "json:DescribeGroupsRequest:v6": _NEWER_THAN_39,
    "json:DescribeGroupsResponse:v6": _NEWER_THAN_39,
    "json:InitProducerIdRequest:v6": _NEWER_THAN_39,
    "json:InitProducerIdResponse:v6": _NEWER_THAN_39,
    "json:EndTxnRequest:v5": _NEWER_THAN_39,
    "json:EndTxnResponse:v5": _NEWER_THAN_39,
    "json:WriteTxnMarkersRequest:v2": _NEWER_THAN_39,
    "json:WriteTxnMarkersResponse:v2": _NEWER_THAN_39,
    "json:TxnOffsetCommitRequest:v5": _NEWER_THAN_39,
    "json:TxnOffsetCommitResponse:v5": _NEWER_THAN_39,
    "json:DescribeLogDirsRequest:v5": _NEWER_THAN_39,
    "json:DescribeLogDirsResponse:v5": _NEWER_THAN_39,
    "json:AlterPartitionReassignmentsRequest:v1": _NEWER_THAN_39,
    "json:AlterPartitionReassignmentsResponse:v1": _NEWER_THAN_39,
    "json:UpdateFeaturesRequest:v2": _NEWER_THAN_39,
    "json:UpdateFeaturesResponse:v2": _NEWER_THAN_39,
    "json:DescribeClusterRequest:v2": _NEWER_THAN_39,
    "json:DescribeClusterResponse:v2": _NEWER_THAN_39,
    "json:ListTransactionsRequest:v2": _NEWER_THAN_39,
    "json:ListTransactionsResponse:v2": _NEWER_THAN_39,
    "json:ListConfigResourcesRequest:v1": _NEWER_THAN_39,
    "json:ListConfigResourcesResponse:v1": _NEWER_THAN_39,
    "legacy:DescribeAclsRequest_v2:v2": (
        "kafka-python bug: v2 is flexible (compact strings and arrays, tag buffers) but the "
        "hand-written SCHEMA is v1's non-flexible layout"
    ),
    "legacy:DescribeAclsResponse_v2:v2": (
        "kafka-python bug: v2 is flexible (compact strings and arrays, tag buffers) but the "
        "hand-written SCHEMA is v1's non-flexible layout"
    ),
    "legacy:DescribeLogDirsRequest_v0:v0": (
        "kafka-python bug: topics[].partitions is a single Int32 in the SCHEMA, the spec has "
        "[]int32"
    ),
}

#: JSON-layer fields whose kafka-python name differs from ours (same position, same wire
#: type), as {class name: {kafka-python path: our name}}. kafka-python patches the
#: authorized-operations fields (renaming them and turning them into its `bitfield` type), and
#: API 74 was renamed ListClientMetricsResources -> ListConfigResources after 3.9.
JSON_RENAMES: dict[str, dict[str, str]] = {
    "MetadataResponse": {
        "topics.authorized_operations": "topic_authorized_operations",
        "authorized_operations": "cluster_authorized_operations",
    },
    "DescribeClusterResponse": {"authorized_operations": "cluster_authorized_operations"},
    "ListConfigResourcesResponse": {
        "config_resources": "client_metrics_resources",
        "config_resources.resource_name": "name",
    },
}

#: kafka-python classes with behaviour beyond the generic codec, and how each is handled.
JSON_OVERRIDES: dict[str, set[str]] = {
    # v0 encode turns topics=None into [] (v0 cannot say "all topics"); our v0 topics is not
    # nullable, so generated values never hit it. Used as is.
    "MetadataRequest": {"encode"},
    # v0-v5 encode copies topics[].name into topic_names when only `topics` is set; `topics`
    # is v6+ and so never set below v6. Used as is.
    "DeleteTopicsRequest": {"encode"},
    # Decodes as v0 when error_code != 0; bypassed (kpm.json_decode says why).
    "ApiVersionsResponse": {"decode"},
    # Spec patches: authorized-operations as `bitfield` (normalised in kpm._scalar_*) and
    # renamed (JSON_RENAMES); changed defaults of non-tagged fields (never used for encoding).
    "MetadataResponse": {"json_patch"},
    "DescribeClusterResponse": {"json_patch"},
    "DescribeGroupsResponse": {"json_patch"},
    "CreatePartitionsRequest": {"json_patch"},
    "ListOffsetsRequest": {"json_patch"},
}
LEGACY_OVERRIDES: dict[str, set[str]] = {
    # Decode as v0 when error_code != 0; bypassed (kpm.legacy_decode says why).
    name: {"decode"}
    for name in (
        "BaseApiVersionsResponse",
        "ApiVersionsResponse_v1",
        "ApiVersionsResponse_v2",
        "ApiVersionsResponse_v3",
        "ApiVersionsResponse_v4",
    )
}

#: Confirmed bugs in *our* codec, as {"<direction>:<case id>": description}; those cases are
#: xfail(strict=True) so the suite stays green while the bug stays visible.
KNOWN_CODEC_BUGS: dict[str, str] = {}


def _shape_diffs(case: KpCase) -> list[str]:
    ours = case.ours()
    if ours is None:
        return ["no class of ours at this version"]
    if case.layer == "json":
        diffs, renames = kpm.json_shape_diff(case.kp_cls._struct, ours, case.version)
        if renames and renames != {
            p: n for p, n in JSON_RENAMES.get(case.kp_name, {}).items() if p in renames
        }:
            diffs.append(f"unexpected renames {renames}")
        return diffs
    return kpm.legacy_shape_diff(case.kp_cls, ours, case.version)


ALL_CASES: tuple[KpCase, ...] = kpm.json_cases() + kpm.legacy_cases()
COMPARED: list[KpCase] = [c for c in ALL_CASES if c.id not in NOT_COMPARABLE]


def _params(layer: str, direction: str) -> list[Any]:
    params = []
    for case in COMPARED:
        if case.layer != layer:
            continue
        bug = KNOWN_CODEC_BUGS.get(f"{direction}:{case.id}")
        marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


_SETTINGS = settings(
    max_examples=5,
    deadline=None,
    database=None,
    # No "explain" phase: its coverage tracing over these deep structures costs tens of
    # seconds per failing case, and a regression fails hundreds of cases at once.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _ours(case: KpCase) -> type[Message]:
    assert not _shape_diffs(case), _shape_diffs(case)
    ours = case.ours()
    assert ours is not None
    return ours


# ----------------------------------------------------------------------------------------------
# The enumeration cannot silently shrink or drift
# ----------------------------------------------------------------------------------------------


def test_not_comparable_list_is_exact() -> None:
    found = {c.id for c in ALL_CASES if _shape_diffs(c)}
    assert found == set(NOT_COMPARABLE), {
        "newly incomparable": sorted(found - set(NOT_COMPARABLE)),
        "listed but comparable or gone": sorted(set(NOT_COMPARABLE) - found),
    }


def test_known_codec_bugs_name_real_cases() -> None:
    ids = {c.id for c in COMPARED}
    for key in KNOWN_CODEC_BUGS:
        direction, _, case_id = key.partition(":")
        assert direction in ("kp_to_ours", "ours_to_kp") and case_id in ids, key


def test_parametrization_is_not_vacuous() -> None:
    for layer, at_least_cases, at_least_keys in (("json", 450, 50), ("legacy", 250, 35)):
        cases = [c for c in COMPARED if c.layer == layer]
        keys = Counter(c.api_key for c in cases)
        assert len(cases) >= at_least_cases, (layer, len(cases))
        assert len(keys) >= at_least_keys, (layer, sorted(keys))
        assert any(c.is_request for c in cases) and any(not c.is_request for c in cases)
    # Every API kafka-python has at all is compared at some version.
    assert {c.api_key for c in COMPARED} == {c.api_key for c in ALL_CASES}


def test_kafka_python_special_cases_are_known() -> None:
    assert kpm.json_overrides() == JSON_OVERRIDES
    assert kpm.legacy_overrides() == LEGACY_OVERRIDES


def test_renames_are_all_used() -> None:
    seen: dict[str, dict[str, str]] = {}
    for case in COMPARED:
        if case.layer == "json":
            ours = case.ours()
            assert ours is not None
            _, renames = kpm.json_shape_diff(case.kp_cls._struct, ours, case.version)
            if renames:
                seen.setdefault(case.kp_name, {}).update(renames)
    assert seen == JSON_RENAMES


# ----------------------------------------------------------------------------------------------
# JSON layer
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", _params("json", "kp_to_ours"))
@_SETTINGS
@given(data=st.data())
def test_json_kafka_python_to_ours(case: KpCase, data: st.DataObject) -> None:
    ours, v, kp_cls = _ours(case), case.version, case.kp_cls
    values = data.draw(kpm.ours_strategy(ours, v, tagged=True), label="values")
    kp_obj = kpm.to_kp(values, ours, kp_cls._struct, v, kp_cls)
    assert kpm.from_kp(kp_obj, ours, kp_cls._struct, v) == values, "mapping is lossy"

    kp_bytes = kp_obj.encode(version=v)
    decoded = ours.decode(kp_bytes, v)
    assert decoded == values
    assert decoded.encode(v) == kp_bytes


@pytest.mark.parametrize("case", _params("json", "ours_to_kp"))
@_SETTINGS
@given(data=st.data())
def test_json_ours_to_kafka_python(case: KpCase, data: st.DataObject) -> None:
    ours, v, kp_cls = _ours(case), case.version, case.kp_cls
    values = data.draw(kpm.ours_strategy(ours, v, tagged=True), label="values")

    our_bytes = values.encode(v)
    kp_decoded = kpm.json_decode(kp_cls, our_bytes, v)
    assert kpm.from_kp(kp_decoded, ours, kp_cls._struct, v) == values
    assert kp_decoded == kpm.to_kp(values, ours, kp_cls._struct, v, kp_cls)
    assert kp_decoded.encode(version=v) == our_bytes


# ----------------------------------------------------------------------------------------------
# Legacy layer
# ----------------------------------------------------------------------------------------------
# Legacy schemas hold a struct's tagged fields as one raw {tag: bytes} buffer: a known tagged
# field would have to be pre-encoded, by us, which would make the check circular. So tagged
# fields stay at their defaults (not written) here; the JSON layer checks them.


@pytest.mark.parametrize("case", _params("legacy", "kp_to_ours"))
@_SETTINGS
@given(data=st.data())
def test_legacy_kafka_python_to_ours(case: KpCase, data: st.DataObject) -> None:
    ours, v, kp_cls = _ours(case), case.version, case.kp_cls
    values = data.draw(kpm.ours_strategy(ours, v, tagged=False), label="values")
    canon = kpm.canon_ours(values, ours, v)
    flat = iter(canon)
    kp_obj = kp_cls(*kpm.build_legacy(kp_cls.SCHEMA, flat))
    assert (
        next(flat, None) is None
        and kpm.canon_legacy(kpm.legacy_values(kp_obj), kp_cls.SCHEMA) == canon
    ), "mapping is lossy"

    kp_bytes = kp_obj.encode()
    decoded = ours.decode(kp_bytes, v)
    assert decoded == values
    assert decoded.encode(v) == kp_bytes


@pytest.mark.parametrize("case", _params("legacy", "ours_to_kp"))
@_SETTINGS
@given(data=st.data())
def test_legacy_ours_to_kafka_python(case: KpCase, data: st.DataObject) -> None:
    ours, v, kp_cls = _ours(case), case.version, case.kp_cls
    values = data.draw(kpm.ours_strategy(ours, v, tagged=False), label="values")

    our_bytes = values.encode(v)
    kp_decoded, consumed = kpm.legacy_decode(kp_cls, our_bytes)
    assert consumed == len(our_bytes)
    assert kpm.canon_legacy(kpm.legacy_values(kp_decoded), kp_cls.SCHEMA) == kpm.canon_ours(
        values, ours, v
    )
    assert kp_decoded.encode() == our_bytes
