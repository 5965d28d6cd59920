"""Broker configuration: Kafka's `server.properties` key names, types and defaults.

This module owns parsing a properties file plus overrides into a typed `BrokerConfig`, and the
table of broker keys we honour (which DescribeConfigs also lists). It must not open sockets or
files other than the properties file it is given.

Where our default differs from Kafka's it is on purpose and noted in `DEFAULTS`' comments:
`listeners` binds 127.0.0.1 (a development broker should not listen on every interface),
`log.dirs` is `./data`, `broker.id` is 0, and the embedded broker's internal topics use replication
factor 1 (in a cluster, `offsets.topic.replication.factor` is Kafka's 3).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range; the message says which."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One broker config key: its type, Kafka's default (as text) and documentation."""

    name: str
    type: str  # int, long, boolean, string, list, double, class, password (never shown)
    default: str | None
    doc: str
    read_only: bool = True


def _k(name: str, type_: str, default: str | None, doc: str, read_only: bool = True) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, read_only)


BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _k("broker.id", "int", "0", "This broker's id (Kafka's default -1 means generate one)."),
        _k(
            "listeners",
            "string",
            "PLAINTEXT://127.0.0.1:9092",
            "Where to listen (Kafka: all interfaces).",
        ),
        _k("advertised.listeners", "string", None, "What clients are told; defaults to listeners."),
        _k(
            "log.dirs",
            "string",
            "./data",
            "Directories holding partition logs (Kafka: /tmp/kafka-logs).",
        ),
        _k("log.dir", "string", "/tmp/kafka-logs", "Used when log.dirs is not set."),
        _k("num.partitions", "int", "1", "Partitions of an auto-created topic.", False),
        _k("default.replication.factor", "int", "1", "Replication factor of auto-created topics."),
        _k(
            "auto.create.topics.enable",
            "boolean",
            "true",
            "Create topics on first metadata request.",
        ),
        _k("delete.topic.enable", "boolean", "true", "Allow DeleteTopics."),
        _k("message.max.bytes", "int", "1048588", "Largest record batch a topic accepts.", False),
        _k("socket.request.max.bytes", "int", "104857600", "Largest request frame accepted."),
        _k("connections.max.idle.ms", "long", "600000", "Close connections idle this long."),
        _k(
            "request.timeout.ms",
            "int",
            "30000",
            "How long WriteTxnMarkers waits for its markers to be replicated.",
        ),
        _k("log.segment.bytes", "int", "1073741824", "Roll a segment at this size.", False),
        _k(
            "log.roll.ms",
            "long",
            None,
            "Roll a segment after this long (log.roll.hours if unset).",
            False,
        ),
        _k("log.roll.hours", "int", "168", "Roll a segment after this many hours."),
        _k("log.retention.ms", "long", None, "Delete segments older than this.", False),
        _k("log.retention.minutes", "int", None, "log.retention.ms in minutes."),
        _k("log.retention.hours", "int", "168", "log.retention.ms in hours."),
        _k("log.retention.bytes", "long", "-1", "Delete old segments beyond this size.", False),
        _k("log.retention.check.interval.ms", "long", "300000", "How often retention runs."),
        _k("log.cleanup.policy", "list", "delete", "delete, compact or both.", False),
        _k(
            "log.cleaner.delete.retention.ms",
            "long",
            "86400000",
            "Keep tombstones this long.",
            False,
        ),
        _k("log.cleaner.min.compaction.lag.ms", "long", "0", "Never compact newer records.", False),
        _k("log.cleaner.backoff.ms", "long", "15000", "Pause between cleaner runs."),
        _k(
            "log.cleaner.dedupe.buffer.size",
            "long",
            "134217728",
            "Memory for the cleaner's offset map; bounds the keys one pass dedupes.",
        ),
        _k(
            "log.cleaner.io.buffer.load.factor",
            "double",
            "0.9",
            "How full the cleaner's offset map may get.",
        ),
        _k("log.index.interval.bytes", "int", "4096", "Bytes between offset index entries.", False),
        _k("log.index.size.max.bytes", "int", "10485760", "Maximum size of an index file.", False),
        _k(
            "log.flush.interval.messages",
            "long",
            str(LONG_MAX),
            "fsync after this many messages.",
            False,
        ),
        _k("log.flush.interval.ms", "long", None, "fsync after this long.", False),
        _k(
            "log.flush.offset.checkpoint.interval.ms",
            "int",
            "60000",
            "How often the offset checkpoint files are written (a failed write is retried then).",
        ),
        _k(
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            "CreateTime or LogAppendTime.",
            False,
        ),
        _k("offsets.topic.num.partitions", "int", "50", "Partitions of __consumer_offsets."),
        _k(
            "offsets.topic.replication.factor",
            "short",
            "3",
            "RF of __consumer_offsets in a cluster; the embedded broker's is always 1.",
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
        _k("num.network.threads", "int", "3", "Accepted for compatibility; trio runs one thread."),
        _k("num.io.threads", "int", "8", "Accepted for compatibility; trio runs one thread."),
        _k(
            "wirebroker.metrics.listener",
            "string",
            None,
            "Ours: HOST:PORT of the Prometheus endpoint (GET /metrics); unset: none.",
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
        _k("broker.rack", "string", None, "This broker's rack, for rack-aware replica assignment."),
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
        ),
        _k(
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            "Security protocol between brokers when inter.broker.listener.name is unset.",
        ),
        # TLS of SSL listeners (wirebroker.tls); each may be set per listener as
        # listener.name.<listener>.<key>, which overrides it
        _k("ssl.keystore.type", "string", "JKS", "PEM or PKCS12 (a JKS store must be converted)."),
        _k("ssl.keystore.location", "string", None, "The keystore: key and certificate chain."),
        _k("ssl.keystore.password", "password", None, "The PKCS12 keystore's password."),
        _k("ssl.key.password", "password", None, "The password of the keystore's private key."),
        _k(
            "ssl.keystore.certificate.chain",
            "password",
            None,
            "The certificate chain in PEM, inline (with ssl.keystore.type=PEM).",
        ),
        _k("ssl.keystore.key", "password", None, "The private key in PEM, inline."),
        _k(
            "ssl.truststore.type", "string", "JKS", "PEM or PKCS12 (a JKS store must be converted)."
        ),
        _k("ssl.truststore.location", "string", None, "Certificates trusted to sign peers'."),
        _k("ssl.truststore.password", "password", None, "The PKCS12 truststore's password."),
        _k("ssl.truststore.certificates", "password", None, "Trusted certificates in PEM, inline."),
        _k(
            "ssl.client.auth", "string", "none", "none, requested or required: client certificates."
        ),
        _k(
            "ssl.principal.mapping.rules",
            "string",
            "DEFAULT",
            "RULE:pattern/replacement/[LU] rules from a client certificate's subject to its user.",
        ),
        _k("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions allowed."),
        _k("ssl.protocol", "string", "TLSv1.3", "Accepted for compatibility."),
        _k("ssl.cipher.suites", "list", None, "TLS 1.2 cipher suites allowed (unset: OpenSSL's)."),
        _k(
            "ssl.endpoint.identification.algorithm",
            "string",
            "https",
            "https: this broker checks its peers' host names; empty: it does not.",
        ),
        _k(
            "sasl.enabled.mechanisms",
            "list",
            "GSSAPI",
            "SASL mechanisms offered (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; GSSAPI is not "
            "offered); listener.name.<l>.sasl.enabled.mechanisms overrides it per listener.",
        ),
        _k(
            "sasl.jaas.config",
            "password",
            None,
            "The broker's own client login, between brokers (not used yet). Listeners read "
            "listener.name.<l>.<mechanism>.sasl.jaas.config (PLAIN's users: "
            'user_<name>="<password>").',
        ),
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
            False,
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
        _k("num.replica.fetchers", "int", "1", "Fetcher tasks per source broker."),
        _k(
            "max.incremental.fetch.session.cache.slots",
            "int",
            "1000",
            "Incremental fetch sessions (KIP-227) the broker keeps.",
        ),
        _k("min.insync.replicas", "int", "1", "ISR size acks=all needs.", False),
        _k(
            "wirebroker.external.controller",
            "boolean",
            "false",
            "Ours: cluster mode without ZooKeeper; partitions and metadata come only from "
            "LeaderAndIsr/UpdateMetadata sent by a controller over the wire (tests act as it).",
        ),
    ]
}

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


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _check_known(where: str, protocol: str) -> None:
    """Refuse a security protocol that is not one of Kafka's, rather than guess one."""
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"{where}: unknown security protocol {protocol!r}; Kafka's are "
            + ", ".join(SECURITY_PROTOCOLS)
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


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings. Build one with :meth:`from_properties`."""

    values: Mapping[str, str] = field(default_factory=dict)

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

    # raw access ---------------------------------------------------------------------------
    def get(self, name: str) -> str | None:
        if name in self.values:
            return self.values[name]
        key = BROKER_KEYS.get(name)
        return key.default if key else None

    def is_set(self, name: str) -> bool:
        return name in self.values

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
        if self.cluster_mode and inter_broker not in ("PLAINTEXT", "SSL"):
            raise ConfigError(
                f"between brokers: {inter_broker} is not implemented by wirebroker's own client "
                "side yet; give the brokers a PLAINTEXT or SSL listener and name it in "
                "inter.broker.listener.name"
            )
        for listener in self.listeners():
            if self.security_protocol(listener.name).startswith("SASL_"):
                # Imported here: the SASL settings module reads this one's ConfigError.
                from wirebroker.sasl.settings import listener_sasl

                listener_sasl(self, listener.name)
        self._validate_authorizer()
        self.metrics_listener()
        for name in (
            "message.max.bytes",
            "offsets.retention.minutes",
            "offsets.retention.check.interval.ms",
        ):
            if self.get_int(name) <= 0:
                raise ConfigError(f"{name} must be positive")

    def _validate_authorizer(self) -> None:
        """An authorizer we do not implement refuses to start: never silently no authorization."""
        # Imported here: the authorizer module reads this one's config at run time.
        from wirebroker.authorizer.acl_authorizer import ACL_AUTHORIZER_NAMES, parse_super_users

        name = (self.get("authorizer.class.name") or "").strip()
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
        text = self.get("listeners") or ""
        out = [Listener.parse(t) for t in text.split(",") if t.strip()]
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
