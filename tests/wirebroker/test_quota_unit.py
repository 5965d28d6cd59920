"""Kafka's quota rules, pure: sampled rates, token buckets, the 8 levels of precedence, quota
entities and DescribeClientQuotas filters, throttled replica lists (`wirebroker.quotas`)."""

from __future__ import annotations

import math

import pytest

from protocol.errors import ErrorCode, KafkaError
from wirebroker.config import BrokerConfig
from wirebroker.quotas.client import ClientQuotaManager, ClientQuotas, QuotaWindows
from wirebroker.quotas.entities import (
    DEFAULT,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    FilterComponent,
    QuotaEntity,
    altered,
    check_filter,
    described,
)
from wirebroker.quotas.rates import SampledRate, TokenBucket, token_throttle_time_ms
from wirebroker.quotas.replication import (
    ReplicationQuotas,
    throttled_partitions,
    valid_throttled_replicas,
)

WINDOWS = QuotaWindows(11, 1000)


def test_a_rate_is_measured_over_at_least_samples_minus_one_windows() -> None:
    rate = SampledRate(11, 1000)
    rate.record(100, 0)
    assert rate.measure(0) == pytest.approx(10.0)  # 100 bytes over 10 windows, not over 0 ms
    rate.record(100, 5_500)  # 5.5 s elapsed: 5 whole windows, padded with 5 more
    assert rate.measure(5_500) == pytest.approx(200 / 10.5)
    rate.record(100, 12_000)  # the first window is long past: 200 bytes over 11 windows
    assert rate.window_size_ms(12_000) == 12_000 - 5_500 + 4_000
    assert rate.measure(23_000) == 0.0  # every window expired


def test_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    rate = SampledRate(11, 1000)
    rate.record(200, 0)  # 20 B/s against a quota of 10 B/s, measured over 10 s
    violation = rate.check(10, 0)
    assert violation is not None
    assert violation.throttle_time_ms() == 10_000  # (20 - 10) / 10 * 10 s
    assert rate.check(20, 0) is None


def test_a_simple_rate_counts_one_window_at_least() -> None:
    rate = SampledRate(11, 1000, simple=True)
    rate.record(1000, 0)
    assert rate.measure(0) == pytest.approx(1000.0)
    assert rate.measure(4000) == pytest.approx(250.0)


def test_average_of_recorded_values() -> None:
    rate = SampledRate(2, 30_000)
    assert math.isnan(rate.average(0))
    rate.record(10, 0)
    rate.record(30, 100)
    assert rate.average(200) == 20.0


def test_token_bucket_starts_full_and_refills_at_the_quota() -> None:
    bucket = TokenBucket(11, 1000)
    assert bucket.check(1.0, 100_000) is None
    bucket.record(12, 1.0, 100_000)  # a burst of 11 tokens, 12 taken
    violation = bucket.check(1.0, 100_000)
    assert violation is not None and token_throttle_time_ms(violation) == 1000
    assert bucket.check(1.0, 101_000) is None


def test_the_eight_levels_of_precedence() -> None:
    """Kafka's order, each level set in turn from the least specific one."""
    manager = ClientQuotaManager("Produce", WINDOWS)
    levels = [
        (QuotaEntity(None, DEFAULT), 1),
        (QuotaEntity(None, "app"), 2),
        (QuotaEntity(DEFAULT, None), 3),
        (QuotaEntity(DEFAULT, DEFAULT), 4),
        (QuotaEntity(DEFAULT, "app"), 5),
        (QuotaEntity("alice", None), 6),
        (QuotaEntity("alice", DEFAULT), 7),
        (QuotaEntity("alice", "app"), 8),
    ]
    for entity, bound in levels:
        manager.update_quota(entity, bound)
        tags = manager.metric_tags("alice", "app")
        assert manager.quota_limit(tags) == bound, entity
    for entity, bound in reversed(levels[1:]):
        manager.update_quota(entity, None)
        assert manager.quota_limit(manager.metric_tags("alice", "app")) == bound - 1
    # Another user's client: the defaults apply to it.
    assert manager.quota_limit(manager.metric_tags("bob", "other")) == 1


def test_a_user_quota_is_shared_by_the_users_clients() -> None:
    manager = ClientQuotaManager("Produce", WINDOWS)
    manager.update_quota(QuotaEntity("alice", None), 100)
    assert manager.metric_tags("alice", "a") == manager.metric_tags("alice", "b") == ("alice", "")
    assert manager.record("alice", "a", 600, 0) == 0  # 60 B/s over 10 s
    assert manager.record("alice", "b", 600, 0) == 2000  # together 120 B/s: throttled
    assert manager.quota_limit(manager.metric_tags("bob", "a")) is None


def test_nothing_is_measured_before_a_quota_is_set() -> None:
    manager = ClientQuotaManager("Fetch", WINDOWS)
    assert manager.record("alice", "a", 10**9, 0) == 0
    assert not manager.sensors
    assert manager.max_value_in_window("alice", "a", 0) is None
    manager.update_quota(QuotaEntity(None, "a"), 1000)
    assert manager.max_value_in_window("x", "a", 0) == 10_000  # quota x (11 - 1) windows


def test_quota_configs_apply_and_remove() -> None:
    quotas = ClientQuotas(BrokerConfig.from_properties())
    entity = QuotaEntity(None, "app")
    quotas.update(entity, {"producer_byte_rate": "1024", "request_percentage": "12.5"})
    assert quotas.produce.overrides[entity] == 1024 and quotas.request.overrides[entity] == 12.5
    assert not quotas.fetch.enabled
    quotas.update(entity, {"SCRAM-SHA-256": "salt=..."})  # not quotas: they go
    assert not quotas.produce.overrides and not quotas.request.overrides


def test_mutation_quota_strict_and_permissive() -> None:
    now = [1_000_000]
    manager = ClientQuotas(BrokerConfig.from_properties()).controller_mutation
    manager.update_quota(QuotaEntity(None, "admin"), 2.0)  # a burst of 22 partitions
    strict = manager.quota_for("u", "admin", True, lambda: now[0])
    strict.record(30)  # the bucket was not empty yet: allowed, and it goes 8 below zero
    assert strict.throttle_time_ms() == 0
    with pytest.raises(KafkaError) as refused:
        strict.record(1)
    assert refused.value.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert strict.throttle_time_ms() == 4000  # 8 tokens at 2 a second
    now[0] += 1000
    assert strict.throttle_time_ms() == 3000  # what is left of it
    permissive = manager.quota_for("u", "admin", False, lambda: now[0])
    permissive.record(1)  # taken anyway, and throttled: 7 below zero
    assert permissive.throttle_time_ms() == 3500


def test_alteration_rules() -> None:
    user = QuotaEntity.from_components([("user", "alice"), ("client-id", None)])
    assert user == QuotaEntity("alice", DEFAULT)
    assert user.path == "users/alice/clients/<default>"
    assert QuotaEntity.from_components([("user", "a b/c")]).path == "users/a%20b%2Fc"
    for components, message in [
        ([], "Invalid empty client quota entity"),
        ([("user", "")], "Empty user not supported"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([("ip", "1.2.3.4"), ("user", "a")], "Invalid quota entity combination"),
    ]:
        with pytest.raises(KafkaError, match=message) as e:
            QuotaEntity.from_components(components)
        assert e.value.error_code == ErrorCode.INVALID_REQUEST
    config = altered(user, {}, [("producer_byte_rate", 1024.0), ("request_percentage", 50.0)])
    assert config == {"producer_byte_rate": "1024", "request_percentage": "50.0"}
    assert altered(user, config, [("producer_byte_rate", None), ("nothing", None)]) == {
        "request_percentage": "50.0"
    }
    with pytest.raises(KafkaError, match="must be a LONG value"):
        altered(user, {}, [("consumer_byte_rate", 10.5)])
    with pytest.raises(KafkaError, match="Invalid configuration key"):
        altered(user, {}, [("connection_creation_rate", 10.0)])
    # A user keeps its SCRAM credentials next to its quotas.
    scram = {"SCRAM-SHA-256": "salt=s,stored_key=k,server_key=k,iterations=4096"}
    alice = QuotaEntity("alice", None)
    assert altered(alice, scram, [("producer_byte_rate", 1.0)]) == {
        **scram,
        "producer_byte_rate": "1",
    }


def test_describe_filters() -> None:
    configs = {
        QuotaEntity("alice", None): {"producer_byte_rate": "1"},
        QuotaEntity("alice", "app"): {"producer_byte_rate": "2"},
        QuotaEntity(DEFAULT, None): {"producer_byte_rate": "3"},
        QuotaEntity(None, "app"): {"consumer_byte_rate": "4"},
        QuotaEntity("bob", None): {"SCRAM-SHA-512": "salt=..."},  # no quotas: never listed
    }

    def paths(components: list[FilterComponent], strict: bool) -> list[str]:
        check_filter(components)
        return [e.path for e, _ in described(configs, components, strict)]

    user_alice = FilterComponent("user", MATCH_EXACT, "alice")
    assert paths([user_alice], True) == ["users/alice"]
    assert paths([user_alice], False) == ["users/alice", "users/alice/clients/app"]
    assert paths([FilterComponent("user", MATCH_DEFAULT, None)], True) == ["users/<default>"]
    any_user = FilterComponent("user", MATCH_SPECIFIED, None)
    assert paths([any_user], True) == ["users/<default>", "users/alice"]
    assert paths([], False) == [
        "clients/app",
        "users/<default>",
        "users/alice",
        "users/alice/clients/app",
    ]
    assert paths([], True) == []
    assert paths([FilterComponent("client-id", MATCH_EXACT, "app")], True) == ["clients/app"]
    for components, code in [
        ([user_alice, user_alice], ErrorCode.INVALID_REQUEST),
        ([FilterComponent("", MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST),
        ([FilterComponent("group", MATCH_SPECIFIED, None)], ErrorCode.UNSUPPORTED_VERSION),
        ([FilterComponent("ip", MATCH_SPECIFIED, None), any_user], ErrorCode.INVALID_REQUEST),
        ([FilterComponent("user", 7, None)], ErrorCode.UNKNOWN_SERVER_ERROR),
    ]:
        with pytest.raises(KafkaError) as e:
            check_filter(components)
        assert e.value.error_code == code


def test_ip_entities_describe_and_paths() -> None:
    """Kafka's ZkAdminManager: an ip component selects only ip entities, a user or client id
    component none of them; without components, all of them unless strict."""
    ip, default_ip = QuotaEntity(None, None, "10.0.0.1"), QuotaEntity(None, None, DEFAULT)
    assert QuotaEntity.from_path("ips/<default>") == default_ip
    assert ip.path == "ips/10.0.0.1" and ip.components() == [("ip", "10.0.0.1")]
    assert default_ip.components() == [("ip", None)]
    configs = {
        ip: {"connection_creation_rate": "5"},
        default_ip: {"connection_creation_rate": "7"},
        QuotaEntity(None, None, "10.0.0.2"): {},  # emptied: kept in ZooKeeper, never listed
        QuotaEntity(None, "app"): {"consumer_byte_rate": "4"},
    }

    def paths(components: list[FilterComponent], strict: bool) -> list[str]:
        check_filter(components)
        return [e.path for e, _ in described(configs, components, strict)]

    assert paths([], False) == ["clients/app", "ips/10.0.0.1", "ips/<default>"]
    assert paths([], True) == []
    assert paths([FilterComponent("ip", MATCH_SPECIFIED, None)], True) == [
        "ips/10.0.0.1",
        "ips/<default>",
    ]
    assert paths([FilterComponent("ip", MATCH_DEFAULT, None)], False) == ["ips/<default>"]
    assert paths([FilterComponent("ip", MATCH_EXACT, "10.0.0.1")], True) == ["ips/10.0.0.1"]
    assert paths([FilterComponent("client-id", MATCH_SPECIFIED, None)], False) == ["clients/app"]
    assert described(configs, [], False)[1][1] == {"connection_creation_rate": 5.0}


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("*", True),
        ("", True),
        ("0:1,1:2", True),
        (" 0:1 , 1:2 ", True),
        ("0:1,,1:2", True),
        ("0: 1", False),
        ("0:1,*", False),
        ("a:1", False),
        ("0", False),
    ],
)
def test_throttled_replica_lists(value: str, valid: bool) -> None:
    assert valid_throttled_replicas(value) is valid


def test_each_broker_keeps_its_own_throttled_partitions() -> None:
    assert throttled_partitions("0:1,1:2,2:1", 1) == {0, 2}
    assert throttled_partitions("*", 1) is None
    config = BrokerConfig.from_properties({"leader.replication.throttled.rate": "100"})
    quotas = ReplicationQuotas(lambda: config, 2)
    quotas.topic_configured("t", {"leader.replication.throttled.replicas": "0:1,1:2"})
    assert quotas.leader.is_throttled("t", 1) and not quotas.leader.is_throttled("t", 0)
    assert not quotas.follower.is_throttled("t", 1)
    quotas.leader.record(2000, 0)
    assert quotas.leader.is_exceeded(0)  # 2000 B in its first second, against 100 B/s
    quotas.topic_configured("t", {})
    assert not quotas.leader.is_throttled("t", 1)
