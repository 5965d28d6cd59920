"""Dynamic broker configs: broker keys changed at run time, as Kafka's DynamicBrokerConfig.

This module owns the dynamic values of one broker: what may be set (Kafka 3.9's rules and
messages), how it is stored, and applying it. Values are set per broker (resource name `<id>`,
entity `<id>`) or as the cluster-wide default (resource name "", entity `<default>`); this
broker's own win over the default, which wins over server.properties (`config.DynamicValues`).
Once applied, every `BrokerConfig.get*()` returns the new value, so whatever reads its settings
when it uses them follows at once (the topic defaults, retention, `message.max.bytes`);
components that build something from settings (TLS contexts, SASL settings, fetchers, the
cleaner's offset map) register a :class:`Reconfigurable` and are told which keys changed.

Stored as Kafka stores them: in a cluster `/config/brokers/<id>` and `/config/brokers/<default>`
in ZooKeeper with a `/config/changes` notification (written by `wirebroker.zk.member`, so Kafka's
tools and brokers read them); the embedded broker keeps `dynamic-broker-configs.json` in its
first log dir. Password keys are stored encrypted with `password.encoder.secret`
(`wirebroker.password_encoder`); without it they cannot be set. Both survive restarts.

`listeners`, `advertised.listeners` and `listener.security.protocol.map` add and remove
listeners (`wirebroker.listeners`: Kafka's rules for them, and the listeners themselves).

Differences from Kafka: a key Kafka marks dynamic but wirebroker does not know
(`metric.reporters`, ...) is stored and described like any unknown key,
without effect.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import suppress
from pathlib import Path

from wirebroker.config import (
    BROKER_KEYS,
    LISTENER_PREFIXED,
    PER_BROKER,
    READ_ONLY,
    BrokerConfig,
    ConfigError,
    check_value,
    key_of,
)
from wirebroker.json_file import write_json_atomically
from wirebroker.password_encoder import PasswordEncoder

log = logging.getLogger(__name__)

#: The entity of the cluster-wide default (Kafka's ZooKeeperInternals.DEFAULT_STRING).
DEFAULT_ENTITY = "<default>"
FILE_NAME = "dynamic-broker-configs.json"

#: Kafka's DynamicSecurityConfigs: settable dynamically only with a listener prefix.
SECURITY_KEYS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)
#: Listener keys that may also be set as the cluster default (Kafka's ClusterLevelListenerConfigs).
_CLUSTER_LEVEL_LISTENER_KEYS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
#: Dynamic password keys: a key whose name ends with one is stored encrypted.
_PASSWORD_KEYS = tuple(
    k.name for k in BROKER_KEYS.values() if k.type == "password" and k.update != READ_ONLY
)


def is_password(name: str) -> bool:
    return name.endswith(_PASSWORD_KEYS)


def entity_of(resource_name: str, broker_id: int) -> str:
    """The entity a BROKER resource names here: `<default>` for "", else this broker's id
    (another id or a name that is no integer is Kafka's INVALID_REQUEST, as ConfigError)."""
    if not resource_name:
        return DEFAULT_ENTITY
    try:
        requested = int(resource_name)
    except ValueError:
        raise ConfigError(f"Node id must be an integer, but it is: {resource_name}") from None
    if requested != broker_id:
        raise ConfigError(
            f"Unexpected broker id, expected {broker_id}, but received {resource_name}"
        )
    return resource_name


class Reconfigurable:
    """A component told of changes to some keys.

    `keys`: the key names it follows, or a test of a name (e.g. every
    `listener.name.<l>.ssl.*`). `validate(candidate)` sees the whole config as it would be and
    raises ConfigError to refuse the change. `reload(candidate)`, for a component that reads
    files: which of them, though named as before, were modified since and are to be read again
    (checked as `validate` checks them), as the names `reconfigure` will be told of.
    `reconfigure(changed)` runs on the broker's thread once the new values are visible through
    `BrokerConfig.get*()`, with the changed names.
    """

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("keys", "reconfigure", "validate", "reload")

    def __init__(
        self,
        keys: Collection[str] | Callable[[str], bool],
        reconfigure: Callable[[frozenset[str]], None],
        validate: Callable[[BrokerConfig], None] | None = None,
        reload: Callable[[BrokerConfig], frozenset[str]] | None = None,
    ) -> None:
        self.keys = keys
        self.reconfigure = reconfigure
        self.validate = validate
        self.reload = reload

    def follows(self, names: Iterable[str]) -> bool:
        keys = self.keys
        if callable(keys):
            return any(keys(n) for n in names)
        return any(n in keys for n in names)


def thread_count_check(
    config: BrokerConfig,
    name: str,
    reconfigure: Callable[[frozenset[str]], None] = lambda changed: None,
) -> Reconfigurable:
    """Kafka's DynamicThreadPool bounds on a thread count: at least 1, at least half and at
    most double the current value. Without `reconfigure` (a component that resizes gives its
    own) the key is accepted without effect."""

    def validate(candidate: BrokerConfig) -> None:
        old, new = config.get_int(name), candidate.get_int(name)
        failed = f"Dynamic thread count update validation failed for {name}={new}"
        if new <= 0:
            raise ConfigError(f"{failed}, value should be at least 1")
        if new < old / 2:
            raise ConfigError(f"{failed}, value should be at least half the current value {old}")
        if new > old * 2:
            raise ConfigError(
                f"{failed}, value should not be greater than double the current value {old}"
            )

    return Reconfigurable({name}, reconfigure, validate)


class DynamicBrokerConfig:
    """One broker's dynamic configs: validated, encoded for storage, applied."""

    def __init__(self, config: BrokerConfig, local_dir: Path | None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        #: The embedded broker's store; None in a cluster (ZooKeeper keeps them).
        self.path = local_dir / FILE_NAME if local_dir is not None else None
        self.encoder = PasswordEncoder.from_config(config)
        self._old_encoder = PasswordEncoder.from_config(config, old=True)
        self._reconfigurables: list[Reconfigurable] = []

    @classmethod
    def open(
        cls, config: BrokerConfig, stored: Mapping[str, Mapping[str, str]] | None = None
    ) -> DynamicBrokerConfig:
        """A broker's dynamic configs, in force in `config` from now on: `stored` (by entity,
        as stored: a cluster's, read from ZooKeeper), else the embedded broker's file."""
        dynamic = cls(config, None if config.cluster_mode else config.log_dirs()[0])
        if stored is None:
            stored = dynamic.read_local()
            again = dynamic.reencoded(stored.get(str(dynamic.broker_id), {}))
            if again is not None:
                dynamic.write_local(str(dynamic.broker_id), again)
        dynamic.load(stored)
        return dynamic

    # reading -------------------------------------------------------------------------------
    def entity_values(self, entity: str) -> dict[str, str]:
        """The values set on an entity, passwords in the clear."""
        layers = self.config.dynamic
        return dict(layers.default if entity == DEFAULT_ENTITY else layers.per_broker)

    def read_local(self) -> dict[str, dict[str, str]]:
        """The embedded broker's stored configs by entity, as stored (passwords encrypted)."""
        if self.path is None or not self.path.exists():
            return {}
        try:
            return {k: dict(v) for k, v in json.loads(self.path.read_text())["brokers"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"cannot read the dynamic broker configs in {self.path}: {e}") from e

    def write_local(self, entity: str, persistent: Mapping[str, str]) -> None:
        """Store an entity's configs in the embedded broker's file (runs in a worker thread)."""
        assert self.path is not None
        stored = self.read_local()
        if persistent:
            stored[entity] = dict(persistent)
        else:
            stored.pop(entity, None)
        write_json_atomically(self.path, {"version": 1, "brokers": stored})

    # subscribing ---------------------------------------------------------------------------
    def add_reconfigurable(self, reconfigurable: Reconfigurable) -> None:
        self._reconfigurables.append(reconfigurable)

    # validating ----------------------------------------------------------------------------
    def validate(self, entity: str, values: Mapping[str, str]) -> None:
        """Refuse a new set of values for `entity` as Kafka does (ConfigError with Kafka's
        message; the caller answers INVALID_REQUEST). Run in a worker thread: a component may
        read files (a listener's keystore) and keep what it made."""
        names = set(values)
        read_only = sorted(
            n for n in names if n in BROKER_KEYS and BROKER_KEYS[n].update == READ_ONLY
        )
        if read_only:
            raise ConfigError(f"Cannot update these configs dynamically: {_set(read_only)}")
        base_security = sorted(names & SECURITY_KEYS)
        if base_security:
            raise ConfigError(
                "These security configs can be dynamically updated only per-listener using "
                f"the listener prefix: {_set(base_security, 'HashSet')}"
            )
        for name in sorted(names):
            key = key_of(name)
            if key is not None and key.update != READ_ONLY:
                check_value(name, key, values[name])
        if entity == DEFAULT_ENTITY:
            per_broker_only = sorted(n for n in names if _per_broker_only(n))
            if per_broker_only:
                raise ConfigError(
                    "Cannot update these configs at default cluster level, broker id must be "
                    f"specified: {_set(per_broker_only)}"
                )
        candidate = self._candidate(entity, values)
        changed = _changed(self.config.current(), candidate.current())
        if not changed:
            return
        # Imported here: the listeners subscribe through this module.
        from wirebroker.listeners import LISTENER_KEYS, validate_listeners, validate_reconfiguration

        listeners_changed = bool(changed & LISTENER_KEYS)
        if listeners_changed:  # Kafka's checks as it reads a config: its messages as they are
            validate_listeners(self.config, candidate)
        try:
            if listeners_changed:
                validate_reconfiguration(self.config, candidate)
            candidate.validate()
            for r in self._reconfigurables:
                if r.validate is not None and r.follows(changed):
                    r.validate(candidate)
        except ConfigError as e:
            # Kafka's wording: its ConfigException("Invalid dynamic configuration", cause).
            raise ConfigError(
                f"Invalid value org.apache.kafka.common.config.ConfigException: {e} for "
                "configuration Invalid dynamic configuration"
            ) from e

    def reload(self, entity: str, values: Mapping[str, str]) -> frozenset[str]:
        """Kafka's reloadUpdatedFilesWithoutConfigChange, after `validate` of new values for
        this broker's own entity, whichever keys they change: the files components read (a
        listener's keystore and truststore) that were modified since are read again and
        checked (ConfigError with Kafka's message: the caller answers INVALID_CONFIG, as
        Kafka). The names to give `apply` as `reload`. Run in a worker thread, as `validate`."""
        candidate = self._candidate(entity, values)
        reloaded = frozenset(
            name
            for r in self._reconfigurables
            if r.reload is not None
            for name in r.reload(candidate)
        )
        # The other components those names concern make what they need here, off the event
        # loop, as a validation does (the inter-broker listener's client stores).
        for r in self._reconfigurables:
            if r.reload is None and r.validate is not None and r.follows(reloaded):
                r.validate(candidate)
        return reloaded

    def prepare(self, entity: str, stored: Mapping[str, str]) -> None:
        """Read what `apply` of an entity's stored configs will need from the disk (a listener's
        new keystore): `validate`'s work, whose components keep what they made for the config
        validated. Called in a worker thread before `apply` on the event loop; what it refuses
        is left to `apply`, which logs what it ignores."""
        if entity not in (DEFAULT_ENTITY, str(self.broker_id)):
            return
        with suppress(ConfigError):
            self.validate(entity, self.from_persistent(entity, stored, quiet=True))

    def _candidate(self, entity: str, values: Mapping[str, str]) -> BrokerConfig:
        layers = self.config.dynamic
        if entity == DEFAULT_ENTITY:
            return self.config.with_dynamic(layers.per_broker, values)
        return self.config.with_dynamic(values, layers.default)

    # storing -------------------------------------------------------------------------------
    def to_persistent(self, entity: str, values: Mapping[str, str]) -> dict[str, str]:
        """The values as stored: password keys encrypted (Kafka's toPersistentProps)."""
        out = dict(values)
        for name, value in values.items():
            if not is_password(name):
                continue
            if entity == DEFAULT_ENTITY:
                raise ConfigError("Password config can be defined only at broker level")
            if self.encoder is None:
                raise ConfigError("Password encoder secret not configured")
            out[name] = self.encoder.encode(value)
        return out

    def from_persistent(
        self, entity: str, stored: Mapping[str, str], *, quiet: bool = False
    ) -> dict[str, str]:
        """Stored values made usable (Kafka's fromPersistentProps): passwords decrypted (with
        `password.encoder.old.secret` if the current secret fails); what is invalid -- a
        read-only key, a base security key, a per-broker key in the default, a value of the
        wrong type, a password that cannot be decrypted -- is left out and logged (unless
        `quiet`)."""
        out: dict[str, str] = {}
        where = "the cluster default" if entity == DEFAULT_ENTITY else f"broker {entity}"
        for name, value in stored.items():
            key = BROKER_KEYS.get(name)
            try:
                if key is not None and key.update == READ_ONLY:
                    raise ConfigError("it cannot be changed dynamically")
                if name in SECURITY_KEYS:
                    raise ConfigError("security configs are set per listener only")
                if entity == DEFAULT_ENTITY and _per_broker_only(name):
                    raise ConfigError("it is set per broker only")
                base = key_of(name)
                if base is not None and base.update != READ_ONLY:
                    check_value(name, base, value)
                if is_password(name):
                    value = self._decode(value)
            except ConfigError as e:
                if not quiet:
                    log.error("dynamic config %s of %s is ignored: %s", name, where, e)
                continue
            out[name] = value
        return out

    def reencoded(self, stored: Mapping[str, str]) -> dict[str, str] | None:
        """This broker's stored configs with the passwords only `password.encoder.old.secret`
        decrypts encrypted again with `password.encoder.secret`, to be stored back (Kafka's
        maybeReEncodePasswords, at start-up); None when there is none."""
        if self.encoder is None or self._old_encoder is None:
            return None
        out = dict(stored)
        for name, value in stored.items():
            if not is_password(name):
                continue
            try:
                self.encoder.decode(value)
                continue
            except ConfigError:
                pass
            try:
                out[name] = self.encoder.encode(self._old_encoder.decode(value))
            except ConfigError:
                continue
            log.info(
                "dynamic config %s: encrypted again with the new password encoder secret", name
            )
        return out if out != stored else None

    def _decode(self, encoded: str) -> str:
        for encoder in (self.encoder, self._old_encoder):
            if encoder is None:
                continue
            try:
                return encoder.decode(encoded)
            except ConfigError:
                continue
        raise ConfigError("the password could not be decoded with password.encoder.secret")

    # applying ------------------------------------------------------------------------------
    def load(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        """Take the stored configs at start-up (before any component subscribed)."""
        default = self.from_persistent(DEFAULT_ENTITY, stored.get(DEFAULT_ENTITY, {}))
        own = self.from_persistent(str(self.broker_id), stored.get(str(self.broker_id), {}))
        self.config.set_dynamic(own, default)
        for entity, values in ((DEFAULT_ENTITY, default), (str(self.broker_id), own)):
            if values:
                log.info("dynamic configs of %s: %s", _entity_name(entity), _loggable(values))

    def apply(
        self, entity: str, stored: Mapping[str, str], *, reload: Collection[str] = ()
    ) -> None:
        """Make an entity's stored configs the current ones and tell the components whose keys
        changed (and those of `reload`: files to read again though their name is the same).
        Another broker's entity is ignored."""
        if entity not in (DEFAULT_ENTITY, str(self.broker_id)):
            return
        values = self.from_persistent(entity, stored)
        before = dict(self.config.current())
        if entity == DEFAULT_ENTITY:
            self.config.set_dynamic(self.config.dynamic.per_broker, values)
        else:
            self.config.set_dynamic(values, self.config.dynamic.default)
        changed = _changed(before, self.config.current()) | frozenset(reload)
        if not changed:
            return
        log.info(
            "dynamic configs of %s now %s (changed: %s)",
            _entity_name(entity),
            _loggable(values),
            ", ".join(sorted(changed)),
        )
        for r in self._reconfigurables:
            if r.follows(changed):
                try:
                    r.reconfigure(changed)
                except Exception:
                    # The values were valid when stored; a component that cannot follow
                    # (a keystore file gone since) keeps what it had.
                    log.exception("reconfiguring after a change of %s failed", sorted(changed))


def _per_broker_only(name: str) -> bool:
    m = LISTENER_PREFIXED.fullmatch(name)
    if m is not None:
        return m[1] not in _CLUSTER_LEVEL_LISTENER_KEYS
    key = BROKER_KEYS.get(name)
    return key is not None and key.update == PER_BROKER


def _changed(before: Mapping[str, str], after: Mapping[str, str]) -> frozenset[str]:
    return frozenset(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))


def _set(names: list[str], kind: str = "Set") -> str:
    """Scala's rendering of a set, as Kafka's messages show it."""
    return f"{kind}({', '.join(names)})"


def _entity_name(entity: str) -> str:
    return "the cluster default" if entity == DEFAULT_ENTITY else f"broker {entity}"


def _loggable(values: Mapping[str, str]) -> str:
    """Values for the log: never a password's."""
    shown = {k: "[hidden]" if is_password(k) else v for k, v in sorted(values.items())}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "none"
