"""Broker configuration: Kafka's `server.properties` key names, types and defaults.

This module owns parsing a properties file plus overrides into a typed `BrokerConfig`, the
table of broker keys we honour (which DescribeConfigs also lists) with how each may change at
run time (Kafka's update modes: read-only, per-broker, cluster-wide) and the bounds Kafka puts
on a dynamic value, the keys' synonyms (`log.retention.ms` / `.minutes` / `.hours`, a listener
key and its unprefixed one), and the layering of dynamic values over static ones that every
reading goes through (`DynamicValues`; `wirebroker.dynamic_config` decides what is set). It must
not open sockets or files other than the properties file it is given.

Where our default differs from Kafka's it is on purpose and noted in the table's docs:
`listeners` binds 127.0.0.1 (a development broker should not listen on every interface),
`log.dirs` is `./data`, `broker.id` is 0, and the embedded broker's internal topics use replication
factor 1 (in a cluster, `offsets.topic.replication.factor` is Kafka's 3).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
_ONE_THREAD = "Accepted for compatibility; one trio thread serves every request."


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range; the message says which."""


#: How a key may be changed at run time (Kafka's `DynamicBrokerConfig` update modes): not at
#: all, for one broker (`--entity-name <id>`), or also as the cluster-wide default
#: (`--entity-default`). Kafka's broker quota keys (the replication throttles) are cluster-wide
#: too, but Kafka describes them as read-only and lists them only when set.
READ_ONLY, PER_BROKER, CLUSTER_WIDE, QUOTA = "read-only", "per-broker", "cluster-wide", "quota"


class ConfigKey:
    """One broker config key: its type, Kafka's default (as text), documentation, how it may be
    changed at run time, and the bounds Kafka's validator puts on a dynamic value."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("name", "type", "default", "doc", "update", "at_least", "choices")

    def __init__(
        self,
        name: str,
        type: str,  # int, long, short, boolean, string, list, double, class, password (hidden)
        default: str | None,
        doc: str,
        update: str = READ_ONLY,
        at_least: int | None = None,
        choices: tuple[str, ...] | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.default = default
        self.doc = doc
        self.update = update
        self.at_least = at_least
        self.choices = choices

    @property
    def read_only(self) -> bool:
        """As DescribeConfigs reports it: not one of Kafka's dynamic keys."""
        return self.update in (READ_ONLY, QUOTA)


def _k(
    name: str,
    type_: str,
    default: str | None,
    doc: str,
    update: str = READ_ONLY,
    *,
    at_least: int | None = None,
    choices: tuple[str, ...] | None = None,
) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, update, at_least, choices)


BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _k("broker.id", "int", "0", "This broker's id (Kafka's default -1 means generate one)."),
        _k(
            "listeners",
            "string",
            "PLAINTEXT://127.0.0.1:9092",
            "Where to listen (Kafka: all interfaces).",
            PER_BROKER,
        ),
        _k(
            "advertised.listeners",
            "string",
            None,
            "What clients are told; defaults to listeners.",
            PER_BROKER,
        ),
        _k(
            "log.dirs",
            "string",
            "./data",
            "Directories holding partition logs (Kafka: /tmp/kafka-logs).",
        ),
        _k("log.dir", "string", "/tmp/kafka-logs", "Used when log.dirs is not set."),
        _k("num.partitions", "int", "1", "Partitions of an auto-created topic.", at_least=1),
        _k("default.replication.factor", "int", "1", "Replication factor of auto-created topics."),
        _k(
            "auto.create.topics.enable",
            "boolean",
            "true",
            "Create topics on first metadata request.",
        ),
        _k("delete.topic.enable", "boolean", "true", "Allow DeleteTopics."),
        _k(
            "message.max.bytes",
            "int",
            "1048588",
            "Largest record batch a topic accepts.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k("socket.request.max.bytes", "int", "104857600", "Largest request frame accepted."),
        # socket buffers, as Kafka's Acceptor and replica fetchers set them (-1: the system's
        # default, and Linux's autotuning, left alone); read-only, as in Kafka 3.9. The send
        # buffer's default differs from Kafka's 102400: with it, a 1 MiB fetch answer waits
        # for the socket to drain several times, and consume throughput fell 20-30 % (bench
        # row 16; docs/perf-notes.md "Socket buffers at Kafka's defaults").
        _k(
            "socket.send.buffer.bytes",
            "int",
            "-1",
            "SO_SNDBUF of each accepted connection (-1, the default here: the system's, "
            "autotuned; Kafka's default is 102400).",
        ),
        _k(
            "socket.receive.buffer.bytes",
            "int",
            "102400",
            "SO_RCVBUF of each listening socket, which its connections inherit (-1: the "
            "system's default).",
        ),
        _k(
            "replica.socket.receive.buffer.bytes",
            "int",
            "65536",
            "SO_RCVBUF of a follower's connections to its leaders (-1: the system's default).",
        ),
        _k("connections.max.idle.ms", "long", "600000", "Close connections idle this long."),
        _k(
            "request.timeout.ms",
            "int",
            "30000",
            "How long a broker waits for another's answer (transaction markers, KIP-890 "
            "verification) and WriteTxnMarkers for its markers to be replicated.",
        ),
        # the broker's defaults of topic configs (their topic names: wirebroker.topic_configs);
        # a dynamic change applies at once to every topic without its own override, as in Kafka
        _k(
            "log.segment.bytes",
            "int",
            "1073741824",
            "Roll a segment at this size.",
            CLUSTER_WIDE,
            at_least=14,
        ),
        _k(
            "log.roll.ms",
            "long",
            None,
            "Roll a segment after this long (log.roll.hours if unset).",
            CLUSTER_WIDE,
        ),
        _k("log.roll.hours", "int", "168", "Roll a segment after this many hours.", at_least=1),
        _k(
            "log.roll.jitter.ms",
            "long",
            None,
            "Random jitter subtracted from the roll time (log.roll.jitter.hours if unset).",
            CLUSTER_WIDE,
        ),
        _k("log.roll.jitter.hours", "int", "0", "log.roll.jitter.ms in hours.", at_least=0),
        _k("log.retention.ms", "long", None, "Delete segments older than this.", CLUSTER_WIDE),
        _k("log.retention.minutes", "int", None, "log.retention.ms in minutes."),
        _k("log.retention.hours", "int", "168", "log.retention.ms in hours."),
        _k(
            "log.retention.bytes",
            "long",
            "-1",
            "Delete old segments beyond this size.",
            CLUSTER_WIDE,
        ),
        _k("log.retention.check.interval.ms", "long", "300000", "How often retention runs."),
        _k(
            "log.cleanup.policy",
            "list",
            "delete",
            "delete, compact or both.",
            CLUSTER_WIDE,
            choices=("compact", "delete"),
        ),
        _k(
            "log.cleaner.delete.retention.ms",
            "long",
            "86400000",
            "Keep tombstones this long.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.cleaner.min.compaction.lag.ms",
            "long",
            "0",
            "Never compact newer records.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.cleaner.max.compaction.lag.ms",
            "long",
            str(LONG_MAX),
            "Compact a record at the latest this long after it was written.",
            CLUSTER_WIDE,
            at_least=1,
        ),
        _k(
            "log.cleaner.min.cleanable.ratio",
            "double",
            "0.5",
            "Share of a log's bytes that must be uncompacted before it is compacted.",
            CLUSTER_WIDE,
        ),
        _k(
            "log.cleaner.backoff.ms",
            "long",
            "15000",
            "Pause between cleaner runs.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.cleaner.threads",
            "int",
            "1",
            "Logs compacted at once, each in a worker thread (0: no compaction).",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.cleaner.dedupe.buffer.size",
            "long",
            "134217728",
            "Memory for the cleaner's offset maps, shared by its threads; bounds the keys one "
            "pass dedupes.",
            CLUSTER_WIDE,
        ),
        _k(
            "log.cleaner.io.buffer.load.factor",
            "double",
            "0.9",
            "How full the cleaner's offset map may get.",
            CLUSTER_WIDE,
        ),
        _k(
            "log.cleaner.io.buffer.size",
            "int",
            "524288",
            "Accepted for compatibility; the cleaner reads batches without a fixed buffer.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.cleaner.io.max.bytes.per.second",
            "double",
            "1.7976931348623157E308",
            "Accepted for compatibility; the cleaner's I/O is not throttled.",
            CLUSTER_WIDE,
        ),
        _k(
            "log.index.interval.bytes",
            "int",
            "4096",
            "Bytes between offset index entries.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.index.size.max.bytes",
            "int",
            "10485760",
            "Maximum size of an index file.",
            CLUSTER_WIDE,
            at_least=4,
        ),
        _k(
            "log.flush.interval.messages",
            "long",
            str(LONG_MAX),
            "fsync after this many messages.",
            CLUSTER_WIDE,
            at_least=1,
        ),
        _k(
            "log.flush.interval.ms",
            "long",
            None,
            "fsync after this long (log.flush.scheduler.interval.ms if unset).",
            CLUSTER_WIDE,
        ),
        _k(
            "log.flush.scheduler.interval.ms",
            "long",
            str(LONG_MAX),
            "log.flush.interval.ms when that is unset.",
        ),
        _k(
            "log.flush.offset.checkpoint.interval.ms",
            "int",
            "60000",
            "How often the offset checkpoint files are written (a failed write is retried then).",
        ),
        _k(
            "log.segment.delete.delay.ms",
            "long",
            "60000",
            "Wait before the files of a deleted segment are removed.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k("log.preallocate", "boolean", "false", "Preallocate segment files.", CLUSTER_WIDE),
        _k(
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            "CreateTime or LogAppendTime.",
            CLUSTER_WIDE,
            choices=("CreateTime", "LogAppendTime"),
        ),
        _k(
            "log.message.timestamp.before.max.ms",
            "long",
            str(LONG_MAX),
            "How far in the past a record's timestamp may be.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.message.timestamp.after.max.ms",
            "long",
            str(LONG_MAX),
            "How far in the future a record's timestamp may be.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.message.timestamp.difference.max.ms",
            "long",
            str(LONG_MAX),
            "Both bounds at once (deprecated).",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "log.message.downconversion.enable",
            "boolean",
            "true",
            "Accepted for compatibility; records are never down-converted.",
            CLUSTER_WIDE,
        ),
        _k(
            "log.message.format.version",
            "string",
            "3.0-IV1",
            "Accepted for compatibility; records are always stored as v2.",
        ),
        _k(
            "log.local.retention.ms",
            "long",
            "-2",
            "Tiered storage (accepted, no effect).",
            CLUSTER_WIDE,
        ),
        _k(
            "log.local.retention.bytes",
            "long",
            "-2",
            "Tiered storage (accepted, no effect).",
            CLUSTER_WIDE,
        ),
        _k(
            "compression.type",
            "string",
            "producer",
            "The codec batches are stored with; producer: as sent.",
            CLUSTER_WIDE,
            choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        _k("compression.gzip.level", "int", "-1", "gzip level (-1 or 1-9).", CLUSTER_WIDE),
        _k("compression.lz4.level", "int", "9", "lz4 level (1-17).", CLUSTER_WIDE),
        _k("compression.zstd.level", "int", "3", "zstd level (-131072 to 22).", CLUSTER_WIDE),
        _k("offsets.topic.num.partitions", "int", "50", "Partitions of __consumer_offsets."),
        _k(
            "offsets.topic.replication.factor",
            "short",
            "3",
            "RF of __consumer_offsets in a cluster; the embedded broker's is always 1.",
        ),
        _k(
            "offsets.topic.segment.bytes",
            "int",
            "104857600",
            "segment.bytes of __consumer_offsets.",
            at_least=1,
        ),
        _k(
            "group.initial.rebalance.delay.ms",
            "int",
            "3000",
            "Wait for more members on a new group.",
        ),
        _k("group.min.session.timeout.ms", "int", "6000", "Smallest session timeout allowed."),
        _k("group.max.session.timeout.ms", "int", "1800000", "Largest session timeout allowed."),
        _k("offset.metadata.max.bytes", "int", "4096", "Largest commit metadata string."),
        _k(
            "offsets.retention.minutes",
            "int",
            "10080",
            "How long the offsets of a group without members are kept.",
        ),
        _k(
            "offsets.retention.check.interval.ms",
            "long",
            "600000",
            "How often offsets are checked for expiry.",
        ),
        _k(
            "offsets.commit.timeout.ms",
            "int",
            "5000",
            "How long a group or offset write waits to be replicated.",
        ),
        # the transaction coordinator (wirebroker.txn)
        _k(
            "transaction.state.log.num.partitions",
            "int",
            "50",
            "Partitions of __transaction_state.",
        ),
        _k(
            "transaction.state.log.replication.factor",
            "short",
            "3",
            "RF of __transaction_state in a cluster; the embedded broker's is always 1.",
        ),
        _k(
            "transaction.state.log.min.isr",
            "int",
            "2",
            "min.insync.replicas of __transaction_state (never more than its replicas).",
        ),
        _k(
            "transaction.state.log.segment.bytes",
            "int",
            "104857600",
            "segment.bytes of __transaction_state.",
        ),
        _k(
            "transaction.state.log.load.buffer.size",
            "int",
            "5242880",
            "Bytes read per step when a __transaction_state partition loads.",
        ),
        _k(
            "transaction.max.timeout.ms",
            "int",
            "900000",
            "Largest transaction timeout a producer may ask for.",
        ),
        _k(
            "transactional.id.expiration.ms",
            "int",
            "604800000",
            "A transactional id idle this long (no transaction) is removed.",
        ),
        _k(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "int",
            "10000",
            "How often transactions past their timeout are looked for (and aborted).",
        ),
        _k(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            "int",
            "3600000",
            "How often expired transactional ids are looked for (and removed).",
        ),
        _k(
            "transaction.partition.verification.enable",
            "boolean",
            "true",
            "Check with the coordinator that a partition is in the transaction before a "
            "transactional produce starts one there (KIP-890 part 1).",
        ),
        # Kafka's thread pools: accepted (dynamically too, within Kafka's bounds) without
        # effect, as one trio thread serves every connection and request
        _k("num.network.threads", "int", "3", _ONE_THREAD, CLUSTER_WIDE, at_least=1),
        _k("num.io.threads", "int", "8", _ONE_THREAD, CLUSTER_WIDE, at_least=1),
        _k("background.threads", "int", "10", _ONE_THREAD, CLUSTER_WIDE, at_least=1),
        _k(
            "num.recovery.threads.per.data.dir",
            "int",
            "1",
            "Accepted for compatibility; recovery runs on the broker's thread.",
            CLUSTER_WIDE,
            at_least=1,
        ),
        # connection limits (wirebroker.connection_limits)
        _k(
            "max.connections",
            "int",
            str(INT_MAX),
            "Connections the broker serves at once (listener.name.<l>.max.connections: per "
            "listener); a new one waits until another closes.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "max.connections.per.ip",
            "int",
            str(INT_MAX),
            "Connections one client address may hold; more are closed at once.",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "max.connections.per.ip.overrides",
            "string",
            "",
            "host:count,... exceptions to max.connections.per.ip.",
            CLUSTER_WIDE,
        ),
        _k(
            "max.connection.creation.rate",
            "int",
            str(INT_MAX),
            "New connections a second the broker accepts (listener.name.<l>.max.connection."
            "creation.rate: per listener); faster ones wait (KIP-612).",
            CLUSTER_WIDE,
            at_least=0,
        ),
        _k(
            "wirebroker.metrics.listener",
            "string",
            None,
            "Ours: HOST:PORT of the Prometheus endpoint (GET /metrics); unset: none.",
        ),
        _k(
            "metrics.sample.window.ms",
            "int",
            "30000",
            "The window of a sample of the rates /metrics reports (connection rates).",
            at_least=1,
        ),
        _k(
            "metrics.num.samples",
            "int",
            "2",
            "Samples the rates /metrics reports are computed over.",
            at_least=1,
        ),
        _k(
            "zookeeper.connect",
            "string",
            None,
            "ZooKeeper for a cluster; unset: embedded single broker.",
        ),
        _k(
            "zookeeper.session.timeout.ms",
            "int",
            "18000",
            "ZooKeeper session timeout; a broker silent this long leaves the cluster.",
        ),
        _k(
            "zookeeper.connection.timeout.ms",
            "int",
            None,
            "How long to wait for ZooKeeper at start-up (unset: the session timeout).",
        ),
        _k(
            "zookeeper.set.acl",
            "boolean",
            "false",
            "Give the znodes this broker creates Kafka's secure ACLs: all for their creator, "
            "read for everyone except the user and broker configs and the delegation tokens. "
            "Needs a login to ZooKeeper: a JAAS Client section (-Djava.security.auth.login."
            "config in KAFKA_OPTS) or client TLS with a keystore.",
        ),
        # TLS to ZooKeeper (KIP-515; wirebroker.zk.tls): the stores are read as a listener's.
        _k(
            "zookeeper.ssl.client.enable",
            "boolean",
            "false",
            "Connect to ZooKeeper over TLS (its secureClientPort), with the zookeeper.ssl.* keys.",
        ),
        _k(
            "zookeeper.clientCnxnSocket",
            "string",
            None,
            "Accepted for compatibility: Kafka needs org.apache.zookeeper.ClientCnxnSocketNetty "
            "for TLS; wirebroker's ZooKeeper client does not.",
        ),
        _k(
            "zookeeper.ssl.keystore.location",
            "string",
            None,
            "The client certificate and key shown to ZooKeeper (for ssl.clientAuth=need).",
        ),
        _k(
            "zookeeper.ssl.keystore.password",
            "password",
            None,
            "The keystore's password, also its key's (ZooKeeper has no key password).",
        ),
        _k(
            "zookeeper.ssl.keystore.type",
            "string",
            None,
            "JKS, PKCS12 or PEM (unset: from the file name, .jks, .p12 or .pem).",
        ),
        _k(
            "zookeeper.ssl.truststore.location",
            "string",
            None,
            "Certificates trusted to sign ZooKeeper's (unset: the system's).",
        ),
        _k("zookeeper.ssl.truststore.password", "password", None, "The truststore's password."),
        _k(
            "zookeeper.ssl.truststore.type",
            "string",
            None,
            "JKS, PKCS12 or PEM (unset: from the file name, .jks, .p12 or .pem).",
        ),
        _k(
            "zookeeper.ssl.protocol",
            "string",
            "TLSv1.2",
            "The TLS version to ZooKeeper when zookeeper.ssl.enabled.protocols is unset.",
        ),
        _k("zookeeper.ssl.enabled.protocols", "list", None, "TLS versions allowed to ZooKeeper."),
        _k(
            "zookeeper.ssl.cipher.suites",
            "list",
            None,
            "TLS 1.2 cipher suites allowed to ZooKeeper (unset: OpenSSL's).",
        ),
        _k(
            "zookeeper.ssl.endpoint.identification.algorithm",
            "string",
            "HTTPS",
            "HTTPS: check ZooKeeper's certificate is for the host in zookeeper.connect; "
            "empty: do not (for testing only).",
        ),
        _k(
            "zookeeper.ssl.crl.enable",
            "boolean",
            "false",
            "Certificate revocation lists: not supported, so true refuses to start.",
        ),
        _k(
            "zookeeper.ssl.ocsp.enable",
            "boolean",
            "false",
            "OCSP: not supported, so true refuses to start.",
        ),
        _k(
            "broker.rack",
            "string",
            None,
            "This broker's rack, for rack-aware replica assignment and replica selection.",
        ),
        _k(
            "replica.selector.class",
            "string",
            None,
            "org.apache.kafka.common.replica.RackAwareReplicaSelector: a leader sends a "
            "consumer naming its rack to a same-rack follower (KIP-392); unset: the leader "
            "serves every consumer. No other class.",
        ),
        _k(
            "inter.broker.listener.name",
            "string",
            None,
            "The listener brokers and the controller use to reach each other (unset: PLAINTEXT).",
        ),
        _k(
            "listener.security.protocol.map",
            "string",
            "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "Security protocol of each listener name, e.g. INTERNAL:PLAINTEXT (as registered).",
            PER_BROKER,
        ),
        _k(
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            "Security protocol between brokers when inter.broker.listener.name is unset.",
        ),
        # TLS of SSL listeners (wirebroker.tls); each may be set per listener as
        # listener.name.<listener>.<key>, which overrides it. Dynamically, per broker and with
        # the listener prefix only: new connections use the new context.
        _k(
            "ssl.keystore.type",
            "string",
            "JKS",
            "JKS, PKCS12, JCEKS or PEM (a JKS file given as PKCS12 is read, and the reverse, "
            "and JCEKS reads JKS files, as Java).",
            PER_BROKER,
        ),
        _k(
            "ssl.keystore.location",
            "string",
            None,
            "The keystore: key and certificate chain.",
            PER_BROKER,
        ),
        _k(
            "ssl.keystore.password", "password", None, "The PKCS12 keystore's password.", PER_BROKER
        ),
        _k(
            "ssl.key.password",
            "password",
            None,
            "The password of the keystore's private key.",
            PER_BROKER,
        ),
        _k(
            "ssl.keystore.certificate.chain",
            "password",
            None,
            "The certificate chain in PEM, inline (with ssl.keystore.type=PEM).",
            PER_BROKER,
        ),
        _k("ssl.keystore.key", "password", None, "The private key in PEM, inline.", PER_BROKER),
        _k(
            "ssl.truststore.type",
            "string",
            "JKS",
            "JKS, PKCS12, JCEKS or PEM (a JKS file given as PKCS12 is read, and the reverse, "
            "and JCEKS reads JKS files, as Java).",
            PER_BROKER,
        ),
        _k(
            "ssl.truststore.location",
            "string",
            None,
            "Certificates trusted to sign peers'.",
            PER_BROKER,
        ),
        _k(
            "ssl.truststore.password",
            "password",
            None,
            "The PKCS12 truststore's password.",
            PER_BROKER,
        ),
        _k(
            "ssl.truststore.certificates",
            "password",
            None,
            "Trusted certificates in PEM, inline.",
            PER_BROKER,
        ),
        _k(
            "ssl.client.auth",
            "string",
            "none",
            "none, requested or required: client certificates.",
            PER_BROKER,
        ),
        _k(
            "ssl.principal.mapping.rules",
            "string",
            "DEFAULT",
            "RULE:pattern/replacement/[LU] rules from a client certificate's subject to its user.",
        ),
        _k(
            "ssl.allow.dn.changes",
            "boolean",
            "false",
            "Whether a keystore changed at run time may have another subject (Kafka's check).",
        ),
        _k(
            "ssl.allow.san.changes",
            "boolean",
            "false",
            "Whether a keystore changed at run time may drop alternative names.",
        ),
        _k("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions allowed.", PER_BROKER),
        _k("ssl.protocol", "string", "TLSv1.3", "Accepted for compatibility.", PER_BROKER),
        _k(
            "ssl.cipher.suites",
            "list",
            None,
            "TLS 1.2 cipher suites allowed (unset: OpenSSL's).",
            PER_BROKER,
        ),
        _k(
            "ssl.endpoint.identification.algorithm",
            "string",
            "https",
            "https: this broker checks its peers' host names; empty: it does not.",
            PER_BROKER,
        ),
        _k(
            "sasl.enabled.mechanisms",
            "list",
            "GSSAPI",
            "SASL mechanisms offered (GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER); "
            "listener.name.<l>.sasl.enabled.mechanisms overrides it per listener. As Kafka, each "
            "needs a JAAS entry: listener.name.<l>.<mechanism>.sasl.jaas.config (SCRAM's: "
            "org.apache.kafka.common.security.scram.ScramLoginModule required;) or the JAAS "
            "file's KafkaServer section. GSSAPI "
            "(Kerberos) needs the gssapi extra (pip install 'wirebroker[gssapi]'), "
            "sasl.kerberos.service.name and a listener.name.<l>.gssapi.sasl.jaas.config of "
            "Krb5LoginModule with useKeyTab=true storeKey=true keyTab=... principal=....",
            PER_BROKER,
        ),
        _k(
            "sasl.jaas.config",
            "password",
            None,
            "Not read by a broker (as Kafka). Listeners and the broker's own login between "
            "brokers read listener.name.<l>.<mechanism>.sasl.jaas.config (PLAIN's users: "
            'user_<name>="<password>"; the broker\'s login: username="..." password="...").',
            PER_BROKER,
        ),
        _k(
            "sasl.mechanism.inter.broker.protocol",
            "string",
            "GSSAPI",
            "The mechanism brokers log in to each other with on a SASL inter-broker listener: "
            "GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER, with the credentials "
            "of that listener's JAAS entry for it.",
        ),
        _k(
            "sasl.kerberos.service.name",
            "string",
            None,
            "The Kerberos service name of the broker's principal (kafka for kafka/host@REALM); "
            "a GSSAPI listener needs it, or serviceName in its JAAS entry.",
            PER_BROKER,
        ),
        _k(
            "sasl.kerberos.principal.to.local.rules",
            "list",
            "DEFAULT",
            "How GSSAPI principals become the user names ACLs name, first rule that applies: "
            "DEFAULT (user@<default realm> is user) or RULE:[n:format](regex)s/from/to/g/L|U.",
            PER_BROKER,
        ),
        # Kafka's Kerberos login thread: accepted and described with Kafka's defaults, not
        # read (docs/security.md, "GSSAPI (Kerberos)": MIT renews the keytab login's tickets).
        _k(
            "sasl.kerberos.kinit.cmd",
            "string",
            "/usr/bin/kinit",
            "Kerberos kinit command path (Kafka's ticket-cache logins). Not read: the broker "
            "logs in from its keytab.",
            PER_BROKER,
        ),
        _k(
            "sasl.kerberos.ticket.renew.window.factor",
            "double",
            "0.8",
            "Kafka's login thread renews its ticket after this share of its lifetime. Not "
            "read: MIT renews the keytab login's ticket.",
            PER_BROKER,
        ),
        _k(
            "sasl.kerberos.ticket.renew.jitter",
            "double",
            "0.05",
            "Share of random jitter added to the renewal time. Not read.",
            PER_BROKER,
        ),
        _k(
            "sasl.kerberos.min.time.before.relogin",
            "long",
            "60000",
            "Login thread sleep time between refresh attempts (ms). Not read.",
            PER_BROKER,
        ),
        _k(
            "connection.failed.authentication.delay.ms",
            "int",
            "100",
            "A failed SASL authentication is answered and its connection closed after this "
            "delay (slows password guessing); 0: at once.",
        ),
        # secured OAUTHBEARER tokens (OIDC, KIP-768): wirebroker.sasl.oauthbearer, .jwks
        _k(
            "sasl.oauthbearer.jwks.endpoint.url",
            "string",
            None,
            "The https, http or file: URL of the JSON Web Key Set that OAUTHBEARER tokens are "
            "verified with, by listener.name.<l>.oauthbearer.sasl.server.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler.",
        ),
        _k(
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            "long",
            "3600000",
            "How often the JWKS is fetched again (a token naming an unknown key id fetches it "
            "sooner, at most once a minute per key id).",
        ),
        _k(
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
            "long",
            "100",
            "First wait after a failed JWKS fetch; doubled after each further failure.",
        ),
        _k(
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            "long",
            "10000",
            "How long a JWKS fetch is retried in all before it is given up (at start-up: the "
            "broker does not start; later: the keys held are kept).",
        ),
        _k(
            "sasl.oauthbearer.expected.audience",
            "list",
            None,
            "Audiences a token's aud claim must name one of (unset: a token with an aud claim "
            "is refused, as Kafka's).",
        ),
        _k(
            "sasl.oauthbearer.expected.issuer",
            "string",
            None,
            "The exact iss claim a token must have (unset: not checked).",
        ),
        _k(
            "sasl.oauthbearer.sub.claim.name",
            "string",
            "sub",
            "The claim that names a token's principal (User:<claim>).",
        ),
        _k("sasl.oauthbearer.scope.claim.name", "string", "scope", "The claim of a token's scope."),
        _k(
            "sasl.oauthbearer.clock.skew.seconds",
            "int",
            "30",
            "Seconds of difference allowed between the token issuer's clock and the broker's "
            "(exp, nbf).",
        ),
        # this broker's own OAUTHBEARER login between brokers (OIDC client credentials):
        # wirebroker.sasl.access_token
        _k(
            "sasl.oauthbearer.token.endpoint.url",
            "string",
            None,
            "The identity provider's token endpoint (https://...) this broker gets its "
            "OAUTHBEARER token from, by the client credentials grant (clientId, clientSecret "
            "and scope of its JAAS entry), to log in to the other brokers.",
        ),
        _k(
            "sasl.oauthbearer.header.urlencode",
            "boolean",
            "false",
            "true: the client id and secret are URL-encoded in the token request's "
            "Authorization header (RFC 6749).",
        ),
        _k(
            "sasl.login.retry.backoff.ms",
            "long",
            "100",
            "First wait after a failed token request; doubled after each further failure.",
        ),
        _k(
            "sasl.login.retry.backoff.max.ms",
            "long",
            "10000",
            "How long a token request is retried in all (at start-up: then the broker does not "
            "start; later: tried again 10 s on).",
        ),
        _k(
            "sasl.login.connect.timeout.ms",
            "int",
            None,
            "How long to wait for the token endpoint's connection (unset: 10 s).",
        ),
        _k(
            "sasl.login.read.timeout.ms",
            "int",
            None,
            "How long to wait for the token endpoint's answer (unset: 10 s).",
        ),
        _k(
            "sasl.login.refresh.window.factor",
            "double",
            "0.8",
            "The share of its lifetime after which this broker's token is fetched again "
            "(0.5 to 1.0).",
        ),
        _k(
            "sasl.login.refresh.window.jitter",
            "double",
            "0.05",
            "Up to this share of the lifetime is added at random to the refresh time (0 to 0.25).",
        ),
        _k(
            "sasl.login.refresh.min.period.seconds",
            "short",
            "60",
            "The token is not fetched again sooner than this after a fetch (0 to 900).",
        ),
        _k(
            "sasl.login.refresh.buffer.seconds",
            "short",
            "300",
            "The token is fetched again at the latest this long before it expires (0 to 3600).",
        ),
        # Encryption of the password keys stored as dynamic broker configs (Kafka's
        # PasswordEncoder; wirebroker.password_encoder)
        _k(
            "password.encoder.secret",
            "password",
            None,
            "The secret dynamic password configs are encrypted with; without it they cannot "
            "be set.",
        ),
        _k(
            "password.encoder.old.secret",
            "password",
            None,
            "The previous secret: stored passwords are re-encrypted with the new one at start-up.",
        ),
        _k(
            "password.encoder.keyfactory.algorithm",
            "string",
            None,
            "PBKDF2WithHmacSHA512 (unset), PBKDF2WithHmacSHA256 or PBKDF2WithHmacSHA1.",
        ),
        _k(
            "password.encoder.cipher.algorithm",
            "string",
            "AES/CBC/PKCS5Padding",
            "AES/CBC/PKCS5Padding or AES/GCM/NoPadding.",
        ),
        _k("password.encoder.key.length", "int", "128", "Key length in bits.", at_least=8),
        _k("password.encoder.iterations", "int", "4096", "PBKDF2 iterations.", at_least=1024),
        _k(
            "sasl.server.max.receive.size",
            "int",
            "524288",
            "Largest frame accepted before SASL authentication completes.",
        ),
        _k(
            "connections.max.reauth.ms",
            "long",
            "0",
            "SASL session lifetime (KIP-368): a connection not re-authenticated by then is "
            "closed; 0: sessions do not expire.",
        ),
        # delegation tokens (KIP-48: wirebroker.sasl.delegation_tokens)
        _k(
            "delegation.token.secret.key",
            "password",
            None,
            "The key token HMACs are made with, the same on every broker; unset or empty: "
            "delegation tokens are disabled.",
        ),
        _k(
            "delegation.token.master.key",
            "password",
            None,
            "DEPRECATED alias of delegation.token.secret.key.",
        ),
        _k(
            "delegation.token.max.lifetime.ms",
            "long",
            "604800000",
            "A token's lifetime, beyond which it cannot be renewed (7 days).",
            at_least=1,
        ),
        _k(
            "delegation.token.expiry.time.ms",
            "long",
            "86400000",
            "How long a token is valid before it must be renewed (1 day).",
            at_least=1,
        ),
        _k(
            "delegation.token.expiry.check.interval.ms",
            "long",
            "3600000",
            "How often tokens past their expiry are removed.",
            at_least=1,
        ),
        # authorization (wirebroker.authorizer)
        _k(
            "authorizer.class.name",
            "string",
            "",
            "kafka.security.authorizer.AclAuthorizer: check every request against ACLs; "
            "empty: no authorization (inter-broker requests: only on the inter-broker listener).",
        ),
        _k(
            "super.users",
            "string",
            None,
            "Principals allowed everything, separated by semicolons, e.g. User:admin;User:broker.",
        ),
        _k(
            "allow.everyone.if.no.acl.found",
            "boolean",
            "false",
            "Allow a request on a resource that no ACL names (true lets everyone in until ACLs exist).",
        ),
        _k(
            "unclean.leader.election.enable",
            "boolean",
            "false",
            "Let a replica outside the ISR lead when no ISR member is live (data loss).",
            CLUSTER_WIDE,
        ),
        _k(
            "auto.leader.rebalance.enable",
            "boolean",
            "true",
            "Move leadership back to preferred replicas when brokers are imbalanced.",
        ),
        _k(
            "leader.imbalance.check.interval.seconds",
            "long",
            "300",
            "How often the controller checks the leader balance.",
        ),
        _k(
            "leader.imbalance.per.broker.percentage",
            "int",
            "10",
            "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.",
        ),
        _k(
            "controlled.shutdown.enable",
            "boolean",
            "true",
            "On a clean stop, move leadership off this broker first.",
        ),
        _k("controlled.shutdown.max.retries", "int", "3", "Controlled shutdown attempts."),
        _k(
            "controlled.shutdown.retry.backoff.ms",
            "long",
            "5000",
            "Pause between controlled shutdown attempts.",
        ),
        _k(
            "cluster.id",
            "string",
            None,
            "Cluster id; generated and stored in meta.properties if unset.",
        ),
        # the replica side of a cluster
        _k(
            "replica.lag.time.max.ms",
            "long",
            "30000",
            "Drop a follower from the ISR after this long behind.",
        ),
        _k("replica.fetch.max.bytes", "int", "1048576", "Bytes a follower fetches per partition."),
        _k(
            "replica.fetch.response.max.bytes",
            "int",
            "10485760",
            "Bytes a follower fetches per request.",
        ),
        _k(
            "replica.fetch.wait.max.ms", "int", "500", "How long a follower's fetch waits for data."
        ),
        _k("replica.fetch.min.bytes", "int", "1", "Bytes a follower's fetch waits for."),
        _k("replica.fetch.backoff.ms", "int", "1000", "Pause after a failed replica fetch."),
        _k("replica.socket.timeout.ms", "int", "30000", "Timeout of inter-broker requests."),
        _k(
            "num.replica.fetchers",
            "int",
            "1",
            "Fetcher tasks per source broker.",
            CLUSTER_WIDE,
            at_least=1,
        ),
        _k(
            "max.incremental.fetch.session.cache.slots",
            "int",
            "1000",
            "Incremental fetch sessions (KIP-227) the broker keeps.",
        ),
        _k("min.insync.replicas", "int", "1", "ISR size acks=all needs.", CLUSTER_WIDE, at_least=1),
        # quotas (wirebroker.quotas): client quotas' windows, replication throttles
        _k("quota.window.num", "int", "11", "Windows a client quota's rate is sampled over."),
        _k("quota.window.size.seconds", "int", "1", "Length of a client quota's windows."),
        _k(
            "controller.quota.window.num",
            "int",
            "11",
            "Windows of a controller mutation quota's token bucket.",
        ),
        _k(
            "controller.quota.window.size.seconds",
            "int",
            "1",
            "Length of a controller mutation quota's windows.",
        ),
        _k(
            "replication.quota.window.num",
            "int",
            "11",
            "Windows a replication throttle's rate is sampled over.",
        ),
        _k(
            "replication.quota.window.size.seconds",
            "int",
            "1",
            "Length of a replication throttle's windows.",
        ),
        # Kafka's broker quota configs (DynamicConfig.Broker): dynamic only, listed when set
        _k(
            "leader.replication.throttled.rate",
            "long",
            str(LONG_MAX),
            "Bytes/s this broker sends as leader to throttled replicas.",
            QUOTA,
            at_least=0,
        ),
        _k(
            "follower.replication.throttled.rate",
            "long",
            str(LONG_MAX),
            "Bytes/s this broker fetches as follower for throttled replicas.",
            QUOTA,
            at_least=0,
        ),
        _k(
            "replica.alter.log.dirs.io.max.bytes.per.second",
            "long",
            str(LONG_MAX),
            "Bytes/s the moves of replicas between this broker's log dirs copy, all together.",
            QUOTA,
            at_least=0,
        ),
        _k(
            "wirebroker.external.controller",
            "boolean",
            "false",
            "Ours: cluster mode without ZooKeeper; partitions and metadata come only from "
            "LeaderAndIsr/UpdateMetadata sent by a controller over the wire (tests act as it).",
        ),
    ]
}

#: Socket buffer sizes: bytes, or -1 for the system's default (`socket_buffer_bytes`).
SOCKET_BUFFER_KEYS = (
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "replica.socket.receive.buffer.bytes",
)
QUOTA_WINDOW_KEYS = tuple(
    k for k in BROKER_KEYS if k.endswith(("quota.window.num", "window.size.seconds"))
)

_LISTENER = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$"
)


_HOST_PORT = re.compile(r"^(?P<host>\[[^\]]*\]|[^:/\[\]\s]*):(?P<port>\d{1,5})$")


@dataclass(frozen=True, slots=True)
class Listener:
    """One `NAME://host:port` entry of `listeners` or `advertised.listeners`."""

    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        m = _LISTENER.match(text.strip())
        if not m:
            raise ConfigError(
                f"bad listener {text!r}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092"
            )
        host = m["host"].strip("[]")
        return cls(m["name"].upper(), host, int(m["port"]))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@functools.lru_cache(maxsize=16)
def _parse_listeners(text: str) -> tuple[Listener, ...]:
    """The listeners of a `listeners` value, parsed once per text: a follower's every Fetch
    asks for the inter-broker listener's name (`RequestContext.authorize_cluster_action`)."""
    return tuple(Listener.parse(t) for t in text.split(",") if t.strip())


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _check_known(where: str, protocol: str) -> None:
    """Refuse a security protocol that is not one of Kafka's, rather than guess one."""
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"{where}: unknown security protocol {protocol!r}; Kafka's are "
            + ", ".join(SECURITY_PROTOCOLS)
        )


_TYPE_NAMES = {"int": "INT", "short": "SHORT", "long": "LONG", "double": "DOUBLE"}
_BOUNDS = {"int": 2**31, "short": 2**15, "long": 2**63}


def check_value(name: str, key: ConfigKey, value: str) -> None:
    """Refuse a value as Kafka's ConfigDef does, with its message (`Invalid value abc for
    configuration message.max.bytes: Not a number of type INT`)."""

    def invalid(reason: str) -> ConfigError:
        return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")

    text = value.strip()
    if key.type in _BOUNDS:
        try:
            number = int(text)
        except ValueError:
            number = _BOUNDS[key.type]
        if not -_BOUNDS[key.type] <= number < _BOUNDS[key.type]:
            raise invalid(f"Not a number of type {_TYPE_NAMES[key.type]}")
        if key.at_least is not None and number < key.at_least:
            raise invalid(f"Value must be at least {key.at_least}")
    elif key.type == "double":
        try:
            float(text)
        except ValueError:
            raise invalid("Not a number of type DOUBLE") from None
    elif key.type == "boolean" and text.lower() not in ("true", "false"):
        raise invalid("Expected value to be either true or false")
    if key.choices is not None:
        items = [i.strip() for i in text.split(",")] if key.type == "list" else [text]
        for item in items:
            if item not in key.choices:
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: String must be one of: "
                    + ", ".join(key.choices)
                )


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties text to a dict: `key=value` or `key: value`, `#`/`!` comments."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m[1]] = m[2]
        else:
            out[line] = ""
    return out


#: `listener.name.<listener>.<key>`: a key for one listener only.
LISTENER_PREFIXED = re.compile(r"listener\.name\.[^.]*\.(.*)")
#: Listener keys written `listener.name.<l>.<mechanism>.<key>` (Kafka's ListenerMechanismConfigs).
_MECHANISM_KEYS = (
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
)
_TIME_SYNONYMS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(name: str, *, match_listener_override: bool) -> list[str]:
    """The keys that set the same thing as `name`, highest precedence first (Kafka's
    `DynamicBrokerConfig.brokerConfigSynonyms`): `log.retention.ms` / `.minutes` / `.hours` and
    the like, and for a listener key (with `match_listener_override`) its unprefixed key."""
    for group in _TIME_SYNONYMS:
        if name in group and name != "log.flush.scheduler.interval.ms":
            return list(group)
    m = LISTENER_PREFIXED.fullmatch(name)
    if m and match_listener_override:
        base = next((k for k in _MECHANISM_KEYS if m[1].endswith(k)), m[1])
        secondary = base.partition(".")[2]
        if base not in BROKER_KEYS and secondary in BROKER_KEYS:
            base = secondary  # listener.name.<l>.<mechanism>.<key>, Kafka's secondary prefix
        return [name, base]
    return [name]


def key_of(name: str) -> ConfigKey | None:
    """The key `name` sets: its own, or for `listener.name.<l>.<key>` the unprefixed one's."""
    if name in BROKER_KEYS:
        return BROKER_KEYS[name]
    for synonym in broker_synonyms(name, match_listener_override=True):
        if synonym in BROKER_KEYS:
            return BROKER_KEYS[synonym]
    return None


def _override(values: dict[str, str], overrides: Mapping[str, str]) -> None:
    """Kafka's overrideProps: each override replaces the key and its synonyms, so a dynamic
    `log.retention.hours` wins over a static `log.retention.ms`."""
    for name, value in overrides.items():
        for synonym in broker_synonyms(name, match_listener_override=False):
            values.pop(synonym, None)
        values[name] = value


@dataclass(eq=False)
class DynamicValues:
    """The values set at run time over a broker's static ones: this broker's own
    (`/config/brokers/<id>`, DYNAMIC_BROKER_CONFIG) over the cluster's default
    (`/config/brokers/<default>`, DYNAMIC_DEFAULT_BROKER_CONFIG). `effective` is the static
    values with both applied (None while neither holds anything)."""

    per_broker: dict[str, str] = field(default_factory=dict)
    default: dict[str, str] = field(default_factory=dict)
    effective: dict[str, str] | None = None

    @classmethod
    def over(
        cls, static: Mapping[str, str], per_broker: Mapping[str, str], default: Mapping[str, str]
    ) -> DynamicValues:
        effective = None
        if per_broker or default:
            effective = dict(static)
            _override(effective, default)
            _override(effective, per_broker)
        return cls(dict(per_broker), dict(default), effective)


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings. Build one with :meth:`from_properties`.

    `values` are the static settings (server.properties and overrides); `dynamic` holds what
    was set at run time (`wirebroker.dynamic_config` alone changes it). Every reading (`get`,
    `get_int`, ..., `is_set`) sees the current value, dynamic ones included, so a component
    that reads its settings when it needs them follows changes without being told.
    """

    values: Mapping[str, str] = field(default_factory=dict)
    dynamic: DynamicValues = field(default_factory=DynamicValues, compare=False, repr=False)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str] | None = None, **overrides: str
    ) -> BrokerConfig:
        merged = dict(properties or {})
        merged.update({k.replace("_", "."): v for k, v in overrides.items()})
        config = cls(merged)
        config.validate()
        return config

    @classmethod
    def load(cls, path: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        try:
            props = parse_properties(path.read_text())
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from e
        props.update(overrides or {})
        config = cls(props)
        config.validate()
        return config

    # dynamic values ------------------------------------------------------------------------
    def current(self) -> Mapping[str, str]:
        """Every key set, statically or dynamically, with its current value."""
        effective = self.dynamic.effective
        return self.values if effective is None else effective

    def with_dynamic(
        self, per_broker: Mapping[str, str], default: Mapping[str, str]
    ) -> BrokerConfig:
        """A copy of these static values under other dynamic ones (to validate a change)."""
        return BrokerConfig(self.values, DynamicValues.over(self.values, per_broker, default))

    def set_dynamic(self, per_broker: Mapping[str, str], default: Mapping[str, str]) -> None:
        """Replace the dynamic values; every reading sees them from now on."""
        layers = DynamicValues.over(self.values, per_broker, default)
        self.dynamic.per_broker = layers.per_broker
        self.dynamic.default = layers.default
        self.dynamic.effective = layers.effective

    # raw access ---------------------------------------------------------------------------
    def get(self, name: str) -> str | None:
        values = self.current()
        if name in values:
            return values[name]
        key = BROKER_KEYS.get(name)
        return key.default if key else None

    def is_set(self, name: str) -> bool:
        return name in self.current()

    def get_int(self, name: str) -> int:
        value = self.get(name)
        if value is None:
            raise ConfigError(f"{name} has no value")
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not a whole number") from None

    def get_float(self, name: str) -> float:
        value = self.get(name)
        if value is None:
            raise ConfigError(f"{name} has no value")
        try:
            return float(value.strip())
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not a number") from None

    def get_bool(self, name: str) -> bool:
        value = (self.get(name) or "").strip().lower()
        if value not in ("true", "false"):
            raise ConfigError(f"{name}={value!r} must be true or false")
        return value == "true"

    def validate(self) -> None:
        for name, key in BROKER_KEYS.items():
            if self.get(name) is None:
                continue
            if key.type in ("int", "long", "short"):
                self.get_int(name)
            elif key.type == "boolean":
                self.get_bool(name)
            elif key.type == "double":
                self.get_float(name)
        for listener in [*self.listeners(), *(self.advertised_listeners() or [])]:
            _check_known(listener.name, self.security_protocol(listener.name))
        inter_broker_listener = self.get("inter.broker.listener.name")
        if inter_broker_listener:
            inter_broker = self.security_protocol(inter_broker_listener)
        else:
            inter_broker = (self.get("security.inter.broker.protocol") or "").upper()
            _check_known("between brokers", inter_broker)
        from wirebroker.system_properties import JAAS_FILE, system_property

        if system_property(JAAS_FILE) is not None:
            # Read now, at start: a SASL listener added at run time may need its KafkaServer
            # section, and the event loop must not wait on the disk for it then.
            from wirebroker.sasl.jaas_file import preload_server_file

            preload_server_file()
        # Imported here: the SASL settings module reads this one's ConfigError.
        from wirebroker.sasl.settings import inter_broker_login, listener_sasl

        if self.cluster_mode and inter_broker.startswith("SASL_"):
            inter_broker_login(self)
        for listener in self.listeners():
            if self.security_protocol(listener.name).startswith("SASL_"):
                listener_sasl(self, listener.name)
        delay = self.get_int("connection.failed.authentication.delay.ms")
        if not 0 <= delay < self.connections_max_idle_ms:
            raise ConfigError(
                f"connection.failed.authentication.delay.ms={delay} must be at least 0 and less "
                f"than connections.max.idle.ms={self.connections_max_idle_ms}"
            )
        self._validate_authorizer()
        # Imported here: this module loads without the partition and storage modules.
        from wirebroker.replica_selector import check_replica_selector

        if refused := check_replica_selector((self.get("replica.selector.class") or "").strip()):
            raise ConfigError(refused)
        # Imported here: the connection limits read this module's config.
        from wirebroker.connection_limits import check_per_ip

        check_per_ip(self)
        self.metrics_listener()
        for name in SOCKET_BUFFER_KEYS:
            self.socket_buffer_bytes(name)
        for name in (
            "message.max.bytes",
            "offsets.retention.minutes",
            "offsets.retention.check.interval.ms",
            *QUOTA_WINDOW_KEYS,
        ):
            if self.get_int(name) <= 0:
                raise ConfigError(f"{name} must be positive")

    def _validate_authorizer(self) -> None:
        """An authorizer we do not implement refuses to start: never silently no authorization."""
        name = (self.get("authorizer.class.name") or "").strip()
        if not name and not self.get("super.users"):
            return  # nothing to check: a broker without ACLs does not load the authorizer
        # Imported here: the authorizer module reads this one's config at run time.
        from wirebroker.authorizer.acl_authorizer import ACL_AUTHORIZER_NAMES, parse_super_users

        if name and name not in ACL_AUTHORIZER_NAMES:
            raise ConfigError(
                f"authorizer.class.name={name} is not implemented: wirebroker has Kafka's "
                f"ACL authorizer ({ACL_AUTHORIZER_NAMES[0]}); set that, or leave it empty"
            )
        try:
            parse_super_users(self.get("super.users"))
        except ValueError as e:
            raise ConfigError(f"super.users: {e}") from None

    @property
    def authorizer_enabled(self) -> bool:
        return bool((self.get("authorizer.class.name") or "").strip())

    def inter_broker_listener_name(self) -> str:
        """The listener name brokers reach each other on: `inter_broker_listener()`, else the
        PLAINTEXT listener (Kafka's default protocol between brokers), else the first one."""
        names = [listener.name for listener in self.listeners()]
        return self.inter_broker_listener() or ("PLAINTEXT" if "PLAINTEXT" in names else names[0])

    # typed views --------------------------------------------------------------------------
    @property
    def broker_id(self) -> int:
        return self.get_int("broker.id")

    def listeners(self) -> list[Listener]:
        out = list(_parse_listeners(self.get("listeners") or ""))
        if not out:
            raise ConfigError(
                "listeners is empty: give at least one, e.g. PLAINTEXT://127.0.0.1:9092"
            )
        return out

    def metrics_listener(self) -> tuple[str, int] | None:
        """`wirebroker.metrics.listener` as (host, port); None when unset (no endpoint)."""
        text = (self.get("wirebroker.metrics.listener") or "").strip()
        if not text:
            return None
        m = _HOST_PORT.match(text)
        if m is None or int(m["port"]) > 65535:
            raise ConfigError(
                f"wirebroker.metrics.listener={text!r}: expected HOST:PORT, e.g. 127.0.0.1:9404 "
                "(port 0: any free port)"
            )
        return m["host"].strip("[]"), int(m["port"])

    def advertised_listeners(self) -> list[Listener] | None:
        text = self.get("advertised.listeners")
        if not text:
            return None
        return [Listener.parse(t) for t in text.split(",") if t.strip()]

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener, from `listener.security.protocol.map`
        (Kafka's default map names each protocol after itself)."""
        protocols: dict[str, str] = {}
        for item in (self.get("listener.security.protocol.map") or "").split(","):
            name, sep, mapped = item.strip().partition(":")
            if sep:
                protocols[name.strip().upper()] = mapped.strip().upper()
        if listener_name.upper() not in protocols:
            raise ConfigError(
                f"listener {listener_name} has no security protocol: add it to "
                f"listener.security.protocol.map, e.g. {listener_name}:PLAINTEXT"
            )
        return protocols[listener_name.upper()]

    def uses_tls(self, listener_name: str) -> bool:
        """Whether the listener's connections are TLS (SSL or SASL_SSL)."""
        return self.security_protocol(listener_name) in ("SSL", "SASL_SSL")

    def inter_broker_listener(self) -> str | None:
        """The listener brokers reach each other on: `inter.broker.listener.name`, else the one
        named after `security.inter.broker.protocol` when that is set (as Kafka), else None
        (the callers' default: PLAINTEXT or the first listener)."""
        name = self.get("inter.broker.listener.name")
        if name:
            return name.upper()
        if self.is_set("security.inter.broker.protocol"):
            return (self.get("security.inter.broker.protocol") or "").strip().upper()
        return None

    def log_dirs(self) -> list[Path]:
        text = (
            self.values.get("log.dirs") or self.values.get("log.dir") or self.get("log.dirs") or ""
        )
        return [Path(p.strip()) for p in text.split(",") if p.strip()]

    @property
    def cluster_mode(self) -> bool:
        """A cluster broker (ZooKeeper, or an external controller) rather than the embedded one."""
        return bool(self.get("zookeeper.connect")) or self.get_bool(
            "wirebroker.external.controller"
        )

    def socket_buffer_bytes(self, name: str) -> int | None:
        """A socket buffer size (`SOCKET_BUFFER_KEYS`) in bytes; None for -1, the system's
        default. Kafka's ConfigDef takes any int, and the JVM then fails every connection
        on a size below 1: refused here at start instead."""
        size = self.get_int(name)
        if size == -1:
            return None
        if size < 1:
            raise ConfigError(
                f"{name}={size}: give a buffer size in bytes, or -1 for the system's default"
            )
        return size

    @property
    def socket_request_max_bytes(self) -> int:
        return self.get_int("socket.request.max.bytes")

    @property
    def connections_max_idle_ms(self) -> int:
        return self.get_int("connections.max.idle.ms")

    def retention_ms(self) -> int:
        for name, scale in (("log.retention.ms", 1), ("log.retention.minutes", 60_000)):
            if self.get(name) is not None:
                return self.get_int(name) * scale
        return self.get_int("log.retention.hours") * 3_600_000

    def roll_ms(self) -> int:
        if self.get("log.roll.ms") is not None:
            return self.get_int("log.roll.ms")
        return self.get_int("log.roll.hours") * 3_600_000
