"""TLS between the broker and ZooKeeper (KIP-515), from Kafka's `zookeeper.ssl.*` keys.

This module owns three things:

- reading Kafka's ZooKeeper client TLS keys (`zookeeper.ssl.client.enable`, the keystore and
  truststore, `zookeeper.ssl.protocol` / `.enabled.protocols` / `.cipher.suites`,
  `zookeeper.ssl.endpoint.identification.algorithm`) into an `ssl.SSLContext`. The stores are
  read by `wirebroker.tls`, as a listener's are (`ZkSslSettings` maps the listener keys to
  these): JKS, PKCS12 or PEM, the private key handed to OpenSSL encrypted with a password
  used once, never in the clear on disk;
- `ZkTls`, which gives that context to kazoo: kazoo's own TLS takes file paths, so each
  KazooClient gets a threading handler of ours whose `create_connection` opens the TCP
  connection as kazoo would and wraps it with the context (`kazoo_options`). The stores are
  read again for a new connection when a store or a password file changed (its size, times
  or inode), as ZooKeeper's Java client makes its SSL context for every connection: a renewed
  certificate is used from the next (re)connection on, no restart. A store that no longer reads fails
  that attempt (logged, the session retrying), as it does Java's; the old context is not
  used instead. It keeps the last failure, so a broker that cannot connect says what to fix
  (`failure`);
- `client_auth_configured`: whether this broker authenticates to ZooKeeper with a
  certificate, which `zookeeper.set.acl=true` needs when there is no SASL login.

Kafka's facts followed: TLS is off unless `zookeeper.ssl.client.enable=true`; the default
protocol is TLSv1.2 and `zookeeper.ssl.enabled.protocols` defaults to it; the host name is
checked unless `zookeeper.ssl.endpoint.identification.algorithm` is empty; ZooKeeper has no
key password of its own (the key's is the keystore's); a store's type, when unset, follows
its file name (`.pem`, `.p12`/`.pfx`, `.jks`), as ZooKeeper's X509Util does. Each key not set
falls back, as in Kafka's KafkaConfig (and its tools), to the ZooKeeper client's JVM system
property (`-Dzookeeper.client.secure`, `-Dzookeeper.ssl.keyStore.location`, ..., read from
KAFKA_OPTS by `wirebroker.system_properties`), and a wrong value is reported under the name it
was set by (`ZkSslSettings`). A store's password is the content of the file named by
`-Dzookeeper.ssl.keyStore.passwordPath` (`-Dzookeeper.ssl.trustStore.passwordPath`) when set,
over any password key or property, as ZooKeeper's X509Util reads it for Kafka's broker and
tools alike (a system property only: Kafka reads no such key from its config or a tool's file).

Differences from Kafka: `zookeeper.clientCnxnSocket` is accepted and not needed (kazoo has one
socket for plaintext and TLS; Kafka's ZooKeeper client fails to connect over TLS without
`org.apache.zookeeper.ClientCnxnSocketNetty`), so `client_auth_configured` does not ask for
it. `zookeeper.ssl.crl.enable` and `zookeeper.ssl.ocsp.enable` refuse to start when true:
Python's ssl neither fetches a certificate's revocation lists nor asks its OCSP responder.
The host name checked is the one in `zookeeper.connect`, as written (ZooKeeper's client also
tries the address's reverse lookup). A missing password file stops the broker, or the tool,
saying which file, where Java's client fails each connection attempt until it times out.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from pathlib import Path, PurePath
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import create_tcp_connection

from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.system_properties import JAVA_TRIM, system_property

# `wirebroker.tls` is imported where a context is made: a broker talking plaintext to
# ZooKeeper never loads it (start-up time).

log = logging.getLogger(__name__)

#: Kafka's ZooKeeper client TLS keys (what the tools' `--zk-tls-config-file` reads) -> the
#: ZooKeeper client's system property each falls back to (Kafka 3.9's
#: ZkConfigs.ZK_SSL_CONFIG_TO_SYSTEM_PROPERTY_MAP).
ZK_TLS_SYSTEM_PROPERTIES = {
    "zookeeper.ssl.client.enable": "zookeeper.client.secure",
    "zookeeper.clientCnxnSocket": "zookeeper.clientCnxnSocket",
    "zookeeper.ssl.keystore.location": "zookeeper.ssl.keyStore.location",
    "zookeeper.ssl.keystore.password": "zookeeper.ssl.keyStore.password",
    "zookeeper.ssl.keystore.type": "zookeeper.ssl.keyStore.type",
    "zookeeper.ssl.truststore.location": "zookeeper.ssl.trustStore.location",
    "zookeeper.ssl.truststore.password": "zookeeper.ssl.trustStore.password",
    "zookeeper.ssl.truststore.type": "zookeeper.ssl.trustStore.type",
    "zookeeper.ssl.protocol": "zookeeper.ssl.protocol",
    "zookeeper.ssl.enabled.protocols": "zookeeper.ssl.enabledProtocols",
    "zookeeper.ssl.cipher.suites": "zookeeper.ssl.ciphersuites",
    "zookeeper.ssl.endpoint.identification.algorithm": "zookeeper.ssl.hostnameVerification",
    "zookeeper.ssl.crl.enable": "zookeeper.ssl.crl",
    "zookeeper.ssl.ocsp.enable": "zookeeper.ssl.ocsp",
}
ZK_TLS_KEYS = tuple(ZK_TLS_SYSTEM_PROPERTIES)
#: ZooKeeper's client system properties naming a file that holds a store's password (ZooKeeper
#: 3.8's X509Util), by the Kafka key of that password: set (not empty), the file's content is
#: the password, whatever the key or its own system property says. System properties only: a
#: broker's config or a tool's `--zk-tls-config-file` holding them is ignored, as Kafka's.
ZK_PASSWORD_FILE_PROPERTIES = {
    "zookeeper.ssl.keystore.password": "zookeeper.ssl.keyStore.passwordPath",
    "zookeeper.ssl.truststore.password": "zookeeper.ssl.trustStore.passwordPath",
}
#: The listener key `wirebroker.tls` asks for -> the ZooKeeper key holding it (others: unset).
_KEYS = {
    **{
        k.removeprefix("zookeeper."): k
        for k in ZK_TLS_KEYS
        if k.startswith("zookeeper.ssl.") and not k.endswith(".enable")
    },
    "ssl.key.password": "zookeeper.ssl.keystore.password",
}
_ENDPOINT_KEY = "zookeeper.ssl.endpoint.identification.algorithm"
_TYPES = {".pem": "PEM", ".p12": "PKCS12", ".pfx": "PKCS12", ".jks": "JKS"}
#: The stores a context is read from.
_STORES = ("ssl.keystore.location", "ssl.truststore.location")
# OpenSSL's verify codes of a certificate for another host name or address.
_NAME_MISMATCH = (62, 64)


class ZkSslSettings:
    """The `zookeeper.ssl.*` keys, asked for by the names of a listener's `ssl.*` keys (a
    `wirebroker.tls.SslSettings`): each set in `config` (the broker's, or a tool's file) or,
    failing that, its ZooKeeper client system property (`system_property_keys`), as Kafka's
    KafkaConfig and tools read them; a store's password from the file a system property names
    (ZK_PASSWORD_FILE_PROPERTIES), read when it is asked for. A message names what the user
    set: the Kafka key, or the system property (`name`).

    A boolean is read by whoever reads it in Kafka (`enabled`): a broker's key by Kafka's
    ConfigDef (true or false, any case, else refused); a broker's system property by KafkaConfig,
    true only when exactly `true`. For a tool (`tool`), ZooKeeper's client reads each, key or
    property (ZKClientConfig: Java's Boolean.parseBoolean of the trimmed value, nothing
    refused), and so it does for a broker whose `-Dzookeeper.client.secure` only ZooKeeper's
    client reads as true (`TRUE`, ` true`): KafkaConfig then leaves TLS off and hands the client
    none of its keys, and the client connects over TLS from its system properties alone
    (`zookeeper_reads`)."""

    __slots__ = ("config", "set_as", "password_files", "zookeeper_reads")

    def __init__(self, config: BrokerConfig, *, tool: bool = False) -> None:
        keys = system_property_keys()
        secure = keys.get("zookeeper.ssl.client.enable")
        self.zookeeper_reads = tool or (
            not config.is_set("zookeeper.ssl.client.enable")
            and secure != "true"
            and java_boolean(secure)
        )
        if (verify := keys.get(_ENDPOINT_KEY)) is not None:
            on = java_boolean(verify) if self.zookeeper_reads else verify == "true"
            keys[_ENDPOINT_KEY] = "HTTPS" if on else ""
        self.set_as = {k: ZK_TLS_SYSTEM_PROPERTIES[k] for k in keys}  # then those config sets
        for k in ZK_TLS_KEYS if tool or not self.zookeeper_reads else ():
            if (v := config.get(k)) is not None and config.is_set(k):
                keys[k] = v
                self.set_as.pop(k, None)
        if tool and (algorithm := keys.get(_ENDPOINT_KEY)) is not None:
            # Kafka hands ZooKeeper's client hostnameVerification=(value is HTTPS, any case)
            keys[_ENDPOINT_KEY] = "HTTPS" if algorithm.upper() == "HTTPS" else ""
        self.config = BrokerConfig(keys)
        self.password_files = {
            k: path
            for k, name in ZK_PASSWORD_FILE_PROPERTIES.items()
            if (path := system_property(name))
        }

    def get(self, key: str) -> str | None:
        """As a listener's setting (stripped, None when unset or blank); but a password read
        from its file is as ZooKeeper reads it: the content, one line end removed."""
        name = _KEYS.get(key)
        if name is not None and name in self.password_files:
            return self._password_file(name)
        value = self.config.get(name) if name else None
        if value is not None and value.strip():
            return value.strip()
        if key == "ssl.enabled.protocols":
            return self.get("ssl.protocol")
        if key.endswith("store.type"):
            location = self.get(key.removesuffix("type") + "location")
            return _TYPES.get(PurePath(location).suffix.lower()) if location else None
        return None

    def enabled(self, key: str) -> bool:
        """The boolean Kafka key `key`, read as Kafka reads it (the class's docstring);
        ConfigError naming a broker's key set to neither true nor false."""
        value = self.config.get(key) or ""
        if self.zookeeper_reads:
            return java_boolean(value)
        if key in self.set_as:  # KafkaConfig's reading of the system property
            return value == "true"
        if value.strip().lower() not in ("true", "false"):
            raise ConfigError(f"{self.name(key)}={value!r} must be true or false")
        return value.strip().lower() == "true"

    def name(self, key: str) -> str:
        """What the user set for `key` (a listener's `ssl.*` key, or a Kafka key): the Kafka
        key, its system property, or the password file's."""
        key = _KEYS.get(key, key)
        if key in self.password_files:
            return ZK_PASSWORD_FILE_PROPERTIES[key]
        return self.set_as.get(key, key)

    def files(self) -> list[str]:
        """The files a context is read from: the stores, and the password files."""
        stores = [self.get(key) for key in _STORES]
        return [path for path in (*stores, *self.password_files.values()) if path]

    def _password_file(self, key: str) -> str | None:
        """The password of Kafka key `key` from its file, as ZooKeeper's SecretUtils reads it
        (UTF-8, one line end removed); ConfigError naming the file, never its content."""
        path = self.password_files[key]
        try:
            secret = Path(path).read_bytes().decode(errors="replace")
        except OSError as e:
            raise ConfigError(
                f"{self.name(key)}={path}: the password file cannot be read: {e.strerror}"
            ) from None
        return secret.removesuffix("\n") or None


def java_boolean(value: str | None) -> bool:
    """A boolean as ZooKeeper's client reads one (ZKConfig.getBoolean): Java's
    Boolean.parseBoolean of the value trimmed, true for `true` in any case, else false."""
    return value is not None and value.strip(JAVA_TRIM).lower() == "true"


def system_property_keys() -> dict[str, str]:
    """ZooKeeper's client TLS system properties that are set, as Kafka's keys, the values as
    given (hostnameVerification, a boolean, is made the endpoint identification algorithm by
    `ZkSslSettings`, which knows who reads it)."""
    return {
        key: value
        for key, name in ZK_TLS_SYSTEM_PROPERTIES.items()
        if (value := system_property(name)) is not None
    }


def client_auth_configured(config: BrokerConfig, *, tool: bool = False) -> bool:
    """True when this broker (or `tool`) presents a certificate to ZooKeeper (TLS on and a
    keystore): an identity ZooKeeper can put in an ACL, as Kafka's `zkTlsClientAuthEnabled`
    (system properties included: `ZkSslSettings`), which asks for the ZooKeeper client's
    zookeeper.client.secure to be exactly `true`."""
    settings = ZkSslSettings(config, tool=tool)
    if settings.zookeeper_reads:
        on = settings.config.get("zookeeper.ssl.client.enable") == "true"
    else:
        on = settings.enabled("zookeeper.ssl.client.enable")
    return on and bool(settings.get("ssl.keystore.location"))


def client_tls(config: BrokerConfig, *, tool: bool = False) -> ZkTls | None:
    """The ZooKeeper client's TLS, or None when `zookeeper.ssl.client.enable` is false
    (system properties included: `ZkSslSettings`; `tool` for a tool's). ConfigError says
    which key or system property is wrong."""
    settings = ZkSslSettings(config, tool=tool)
    if not settings.enabled("zookeeper.ssl.client.enable"):
        return None
    for key, what in (
        ("zookeeper.ssl.crl.enable", "fetch certificate revocation lists"),
        ("zookeeper.ssl.ocsp.enable", "ask OCSP responders"),
    ):
        if settings.enabled(key):
            raise ConfigError(
                f"{settings.name(key)}=true is not supported: wirebroker's TLS (OpenSSL through "
                f"Python's ssl) does not {what}; set it false, and remove a revoked "
                "certificate's CA from zookeeper.ssl.truststore.location or rotate ZooKeeper's "
                "certificate instead"
            )
    return ZkTls(settings)


#: What says a store file changed: None for a file that cannot be looked at.
_Stamp = tuple[tuple[int, int, int, int] | None, ...]


def _stamp(settings: ZkSslSettings) -> _Stamp:
    """The inode, size, modification and change times of the files a context is read from (a
    file replaced, by a rename or in place, changes one of them); a stat, no read."""
    stamps: list[tuple[int, int, int, int] | None] = []
    for path in settings.files():
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(stamps)


class ZkTls:
    """The TLS of one ZooKeeper client: the context the KazooClients it makes connect with,
    made again from the stores for a new connection when their files changed
    (`connection_context`, from kazoo's connection threads), and how the last attempt
    failed, if it did (read once a connection attempt has given up)."""

    __slots__ = ("settings", "context", "last_failure", "_stamp", "_store_error", "_lock")

    def __init__(self, settings: ZkSslSettings) -> None:
        from wirebroker.tls import client_context

        self.settings = settings
        self._stamp: _Stamp | None = _stamp(settings)  # before the read: a change during it counts
        self.context = client_context(settings)  # ConfigError at start-up: the broker stops
        self.last_failure: str | None = None
        self._store_error: str | None = None  # the last read's error, logged once
        self._lock = threading.Lock()

    def connection_context(self) -> ssl.SSLContext:
        """The context of a new connection: the stores read again if a file changed since
        they were read (or the last read failed). A store that does not read fails this
        attempt with OSError, which kazoo takes for a dropped connection and tries again."""
        with self._lock:
            stamp = _stamp(self.settings)
            if stamp == self._stamp:
                return self.context
            from wirebroker.tls import client_context

            try:
                self.context = client_context(self.settings)
            except (ConfigError, ValueError, ssl.SSLError) as e:  # a store half written, say
                self._stamp = None  # read again on the next attempt, changed or not
                where = "" if isinstance(e, ConfigError) else f"{self._locations()}: "
                self.last_failure = f"the ZooKeeper client's TLS stores cannot be read: {where}{e}"
                if self._store_error != self.last_failure:
                    self._store_error = self.last_failure
                    log.error(
                        "%s; no connection to ZooKeeper is attempted until they can be "
                        "(the session retries, reading them again each time)",
                        self.last_failure,
                    )
                raise OSError(self.last_failure) from None
            self._stamp, self._store_error = stamp, None
            log.info("the ZooKeeper client's TLS stores changed: read again for a new connection")
            return self.context

    def _locations(self) -> str:
        return ", ".join(
            f"{self.settings.name(key)}={self.settings.get(key)}"
            for key in _STORES
            if self.settings.get(key)
        )

    def record(self, where: str, error: ssl.SSLError) -> None:
        reason = getattr(error, "verify_message", None) or error.reason or error
        self.last_failure = f"TLS with ZooKeeper at {where} failed ({reason}): {_hint(error)}"


def kazoo_options(zk_tls: ZkTls | None) -> dict[str, Any]:
    """KazooClient's keyword arguments for TLS (none without): a handler of its own (kazoo
    starts and stops a client's handler with it) that connects with the context."""
    if zk_tls is None:
        return {}
    return {"use_ssl": True, "handler": _TlsHandler(zk_tls)}


def failure(zk_tls: ZkTls | None) -> str:
    """What went wrong with TLS on the last attempt to connect, and what to set: "" if nothing."""
    if zk_tls is None or zk_tls.last_failure is None:
        return ""
    return zk_tls.last_failure


def _hint(error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        if error.verify_code in _NAME_MISMATCH:
            return (
                "ZooKeeper's certificate is not for the host named in zookeeper.connect: name "
                "a host (or address) its certificate holds, or, for testing only, set "
                "zookeeper.ssl.endpoint.identification.algorithm= (empty)"
            )
        return (
            "ZooKeeper's certificate is not signed by a CA this broker trusts: set "
            "zookeeper.ssl.truststore.location to a truststore holding that CA"
        )
    reason = str(error.reason or "")
    if "CERTIFICATE" in reason or "HANDSHAKE_FAILURE" in reason or "UNKNOWN_CA" in reason:
        return (
            "ZooKeeper refused this broker's certificate or its absence: when it requires "
            "client certificates (ssl.clientAuth=need), set zookeeper.ssl.keystore.location to "
            "a keystore whose certificate a CA in ZooKeeper's truststore signed"
        )
    if "VERSION" in reason or "PROTOCOL" in reason or "CIPHER" in reason:
        return (
            "no TLS version or cipher suite in common with ZooKeeper: check "
            "zookeeper.ssl.protocol, zookeeper.ssl.enabled.protocols and zookeeper.ssl.cipher.suites"
        )
    return "is that port ZooKeeper's secureClientPort (TLS), not its clientPort?"


class _TlsHandler(SequentialThreadingHandler):
    """kazoo's threading handler, its connections wrapped in our context (kazoo's own TLS
    arguments, file paths, are ignored)."""

    def __init__(self, zk_tls: ZkTls) -> None:
        super().__init__()
        self._tls = zk_tls

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        **_kazoo_tls: Any,
    ) -> ssl.SSLSocket:
        self._tls.last_failure = None  # what went wrong before is no longer news
        context = self._tls.connection_context()
        sock = create_tcp_connection(socket, address, timeout=timeout)
        try:
            # The handshake, bounded by the socket's connect timeout.
            return context.wrap_socket(sock, server_hostname=hostname or address[0])
        except OSError as e:
            sock.close()
            if isinstance(e, ssl.SSLError):
                self._tls.record(f"{hostname or address[0]}:{address[1]}", e)
            raise
