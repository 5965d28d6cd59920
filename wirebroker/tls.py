"""TLS for SSL listeners and for this broker's own connections to its peers, from Kafka's ssl.* keys.

This module owns three things:

- the `ssl.SSLContext` of a listener (`server_context`, kept per listener by `ListenerContexts`,
  which makes it again when the listener's `listener.name.<l>.ssl.*` keys change at run time,
  or its store files are modified in place, checked as Kafka's SslFactory checks new stores:
  new connections use the new keystore and truststore, open ones keep theirs) and of the
  inter-broker client side
  (`inter_broker_client_context`), built from Kafka's `ssl.*` keys, each of which a
  `listener.name.<listener>.ssl.*` key overrides (Kafka's DefaultSslEngineFactory); the
  ZooKeeper client's context is built the same way from `zookeeper.ssl.*`
  (`wirebroker.zk.tls`, an `SslSettings` of its own given to `client_context`). Keystores
  are JKS (`wirebroker.jks`), PKCS12 or PEM (a file, or inline `ssl.keystore.certificate.chain`
  / `ssl.keystore.key`), read with `cryptography`. Truststores alike.
- `TlsTransport`: an accepted connection's byte stream through an `ssl.SSLObject` driven with
  memory BIOs over the raw socket descriptor, behind the interface of
  `wirebroker.transport.PlainTransport` (so the connection loop does not know which it has).
  File slices of fetch responses are read with `os.pread` and encrypted: no `sendfile` on TLS,
  as in Kafka (a slice not in the page cache is read into it by a worker thread first, as on
  a plaintext listener).
- the principal of a TLS client: `User:` and the certificate's subject DN in RFC 2253 form as
  Java's X500Principal.getName() prints it (`certificate_entries.rfc2253_name`: an attribute
  without an RFC 2253 keyword, such as emailAddress, as `OID=#hex`), mapped by
  `ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper), `User:ANONYMOUS` without a
  certificate.

Differences from Kafka: `ssl.enabled.protocols` is applied as a range (lowest to highest
named), as OpenSSL cannot leave a version out in the middle; `ssl.cipher.suites` restricts
TLS 1.2 suites (OpenSSL or IANA names), never TLS 1.3's. No ALPN, as Kafka.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import ssl
import struct
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import trio

from storage.page_cache import cached
from wirebroker.config import BROKER_KEYS, LISTENER_PREFIXED, BrokerConfig, ConfigError
from wirebroker.transport import ANONYMOUS, chunk_size, flatten, load_slice

if TYPE_CHECKING:
    from cryptography import x509

    from wirebroker.certificate_entries import CertificateEntry
    from wirebroker.jks import JksStore

# `cryptography` is imported where a store or a certificate is read: a broker without TLS
# never loads it (start-up time).

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_RECEIVE = 64 * 1024
#: Plaintext gathered before it is encrypted (a TLS record carries 16 KiB at most).
_PIECE = 64 * 1024
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----\s*", re.S)
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class HandshakeFailed(Exception):
    """A TLS handshake failed or timed out; only its connection is closed."""


# settings -------------------------------------------------------------------------------------
class SslSettings(Protocol):
    """Where a context's settings come from, asked for by the names of Kafka's `ssl.*` keys:
    a listener's (`_Settings`) or the ZooKeeper client's (`wirebroker.zk.tls`)."""

    def get(self, key: str) -> str | None:
        """The setting's value (stripped), None when unset or blank."""
        ...

    def name(self, key: str) -> str:
        """The key a message telling the user what to set names."""
        ...


class _Settings:
    """The ssl.* keys of one listener: `listener.name.<l>.ssl.*` first, then `ssl.*`."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("config", "listener")

    def __init__(self, config: BrokerConfig, listener: str) -> None:
        self.config = config
        self.listener = listener

    def get(self, key: str) -> str | None:
        value = self.config.get(f"listener.name.{self.listener.lower()}.{key}")
        if value is None:
            value = self.config.get(key)
        return value.strip() if value is not None and value.strip() else None

    def name(self, key: str) -> str:
        return key


def _items(settings: SslSettings, key: str) -> list[str]:
    return [item.strip() for item in (settings.get(key) or "").split(",") if item.strip()]


def server_context(config: BrokerConfig, listener: str) -> tuple[ssl.SSLContext, PrincipalMapper]:
    """An SSL listener's context (its keystore, truststore and `ssl.client.auth`) and the
    mapping of its clients' certificates to principals."""
    made = _server_context(config, listener)
    return made.context, made.mapper


#: The store files a listener's context is made from: a change of their modification time
#: makes it again (Kafka's FileBasedStore).
_STORE_FILES = ("ssl.keystore.location", "ssl.truststore.location")


class _Made:
    """A listener's context as made from its settings, and what a change of its stores is
    checked against (Kafka's SslFactory keeps its old stores for that): its keystore, the
    modification time of each store file when it was read, and on the inter-broker listener a
    client context of the same stores (`_check_handshakes`)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("context", "mapper", "keystore", "last_modified", "client")

    def __init__(
        self,
        context: ssl.SSLContext,
        mapper: PrincipalMapper,
        keystore: _Keystore,
        last_modified: dict[str, int | None],
    ) -> None:
        self.context = context
        self.mapper = mapper
        self.keystore = keystore
        #: By path: the file's modification time when it was read (None: not known).
        self.last_modified = last_modified
        self.client: ssl.SSLContext | None = None

    def files_modified(self) -> bool:
        """Whether a store file was modified since it was read (as Kafka's
        FileBasedStore.modified, a file whose time cannot be read now was not)."""
        return any(
            (now := _modification_time(path)) is not None and now != then
            for path, then in self.last_modified.items()
        )


def _modification_time(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _server_context(config: BrokerConfig, listener: str) -> _Made:
    settings = _Settings(config, listener)
    last_modified = {p: _modification_time(p) for k in _STORE_FILES if (p := settings.get(k))}
    mapper = PrincipalMapper(settings.get("ssl.principal.mapping.rules"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_common(context, settings)
    keystore = _load_keystore(context, settings, list_entries=True)
    if keystore is None:
        raise ConfigError(
            f"listener {listener} is SSL but has no keystore: set ssl.keystore.location "
            "(or ssl.keystore.certificate.chain and ssl.keystore.key)"
        )
    client_auth = (settings.get("ssl.client.auth") or "none").lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth={client_auth!r} must be none, requested or required")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, settings)
    return _Made(context, mapper, keystore, last_modified)


class ListenerContexts:
    """The TLS context and principal mapping of every listener (None for a plaintext one),
    made again for a listener whose `listener.name.<l>.ssl.*` keys changed, or whose store
    files were modified in place (`reload`): a dynamic config's
    :class:`~wirebroker.dynamic_config.Reconfigurable` (`follows`, `validate`, `reload`,
    `reconfigure`)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        #: What each SSL listener's context was made from: a change is checked against it.
        self.served: dict[str, _Made] = {}
        # A bad keystore or truststore fails here, before any file or socket is opened.
        self.contexts = {
            listener.name: self._keep(listener.name, _listener_context(config, listener.name))
            for listener in config.listeners()
        }
        #: The contexts `validate` and `reload` made (run in a worker thread: the stores are
        #: read there), by listener, with the config they were made for: `reconfigure` takes
        #: them when that config is the one applied, so the event loop reads no store.
        self._made: dict[str, tuple[Mapping[str, str], _Made]] = {}

    def _keep(
        self, listener: str, made: _Made | None
    ) -> tuple[ssl.SSLContext, PrincipalMapper] | None:
        """A listener's context and principal mapping, what they were made from kept."""
        if made is None:
            return None
        self.served[listener] = made
        return made.context, made.mapper

    def follows(self, name: str) -> bool:
        return self._listener_of(name) is not None

    def _listener_of(self, name: str) -> str | None:
        """The SSL listener a `listener.name.<l>.ssl.*` key is of (None for any other key)."""
        m = LISTENER_PREFIXED.fullmatch(name)
        if m is None or not m[1].startswith("ssl."):
            return None
        listener = name.split(".")[2].upper()
        return listener if self.contexts.get(listener) is not None else None

    def validate(self, candidate: BrokerConfig) -> None:
        """The new stores of the listeners whose TLS settings change must load and pass Kafka's
        SslFactory checks against the old ones (`_checked`; ConfigError says why not); the
        contexts are kept for `reconfigure`. Called in a worker thread
        (`DynamicBrokerConfig.validate`, `prepare`): it reads the stores."""
        made: dict[str, tuple[Mapping[str, str], _Made]] = {}
        for listener in self._kept(candidate):
            if _ssl_values(candidate, listener) != _ssl_values(self.config, listener):
                new = self._checked(candidate, listener)
                if new is not None:
                    made[listener] = (candidate.current(), new)
        self._made = made

    def reload(self, candidate: BrokerConfig) -> frozenset[str]:
        """Kafka's reload of store files modified in place (`DynamicBrokerConfig.reload`, after
        `validate`, for any change of this broker's own configs): a listener whose TLS
        settings stay as they are but whose keystore or truststore file was modified since it
        was read is read again and checked as a changed one (ConfigError says why not); its
        context is kept for `reconfigure`, told of it by the names returned (the listener's
        keystore location). Called in a worker thread: it reads the stores."""
        names = set()
        for listener in self._kept(candidate):
            if _ssl_values(candidate, listener) != _ssl_values(self.config, listener):
                continue  # `validate`'s
            if not self.served[listener].files_modified():
                continue
            new = self._checked(candidate, listener)
            if new is not None:
                self._made[listener] = (candidate.current(), new)
                names.add(f"listener.name.{listener.lower()}.ssl.keystore.location")
        return frozenset(names)

    def _kept(self, candidate: BrokerConfig) -> list[str]:
        """The SSL listeners served now that `candidate` keeps."""
        kept = {lst.name for lst in candidate.listeners()}
        return [lst for lst in self.served if lst in kept and self.contexts.get(lst) is not None]

    def _checked(self, candidate: BrokerConfig, listener: str) -> _Made | None:
        """The listener's context made from `candidate` (None: it is no longer SSL), checked
        as Kafka's SslFactory checks new stores: the keystore against the old one
        (`_check_keystore_change`), and on the inter-broker listener, when a store's keys
        changed or its file was modified, the handshakes between the old and new stores."""
        old = self.served[listener]
        try:
            new = _listener_context(candidate, listener)
        except StoreLoadError as e:  # Kafka's words, then why
            raise ConfigError(f"{_FAILED}{e.kafka} ({e})") from None
        if new is None:
            return None
        _check_keystore_change(_Settings(candidate, listener), old.keystore, new.keystore)
        rebuilt = _stores_changed(self.config, candidate, listener) or old.files_modified()
        if old.client is not None and new.client is not None and rebuilt:
            _check_handshakes(listener, old, new)
        return new

    async def add(self, listener: str) -> None:
        """A listener added at run time (`wirebroker.listeners`): its context, made now in a
        worker thread."""
        made = await trio.to_thread.run_sync(_listener_context, self.config, listener)
        self.contexts[listener] = self._keep(listener, made)

    def reconfigure(self, changed: frozenset[str]) -> None:
        made, self._made = self._made, {}
        current = self.config.current()
        for listener in sorted({lst for n in changed if (lst := self._listener_of(n))}):
            kept = made.get(listener)
            if kept is not None and kept[0] == current:
                self.contexts[listener] = self._keep(listener, kept[1])
            else:  # a change no validation read the stores for: read here
                self.contexts[listener] = self._keep(
                    listener, _listener_context(self.config, listener)
                )
            log.info("listener %s: new TLS context for new connections", listener)


def _listener_context(config: BrokerConfig, listener: str) -> _Made | None:
    if not config.uses_tls(listener):
        return None
    made = _server_context(config, listener)
    if listener == config.inter_broker_listener():
        # A client of the same stores, the other side of the handshakes of a change.
        client = client_context(_Settings(config, listener))
        client.check_hostname = False
        made.client = client
    return made


def _ssl_values(config: BrokerConfig, listener: str) -> dict[str, str | None]:
    """A listener's TLS settings."""
    settings = _Settings(config, listener)
    return {k: settings.get(k) for k in BROKER_KEYS if k.startswith("ssl.")}


def _stores_changed(old: BrokerConfig, new: BrokerConfig, listener: str) -> bool:
    """Whether a listener's store keys differ between two configs."""
    before, after = _Settings(old, listener), _Settings(new, listener)
    return any(
        before.get(k) != after.get(k)
        for k in BROKER_KEYS
        if k.startswith(("ssl.keystore", "ssl.key.", "ssl.truststore"))
    )


#: The start of Kafka's message for new stores its SslFactory refuses.
_FAILED = "Validation of dynamic config update of SSLFactory failed: "
_CONFIG_EXCEPTION = "org.apache.kafka.common.config.ConfigException: "
_KAFKA_EXCEPTION = "org.apache.kafka.common.KafkaException: "
_INVALID_CONFIGURATION = "org.apache.kafka.common.errors.InvalidConfigurationException: "


def _check_handshakes(listener: str, old: _Made, new: _Made) -> None:
    """Kafka's SslEngineValidator for the inter-broker listener's new stores: a broker with
    the old ones and one with the new must still connect to each other, each way (the old
    server with a client of the new stores, the new server with a client of the old, as they
    were read), host names not checked, so a rotation the other brokers would refuse is
    refused here first."""
    for server, client, clients in (
        (old.context, new.client, "new"),
        (new.context, old.client, "old"),
    ):
        assert client is not None
        try:
            _handshake(server, client)
        except ssl.SSLError as e:
            servers = "old" if clients == "new" else "new"
            raise ConfigError(
                f"{_FAILED}a broker with the {clients} stores of the inter-broker listener "
                f"{listener} cannot connect to one with the {servers} ones ({e.reason or e}): "
                "update the truststores to trust both certificates first"
            ) from None


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> None:
    """A TLS handshake between the two contexts in memory; SSLError when it fails."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_side=False)
    done = {"server": False, "client": False}
    for _ in range(16):  # a TLS 1.2 or 1.3 handshake takes a few flights
        for name, side, out, peer_in in (
            ("client", client, client_out, server_in),
            ("server", server, server_out, client_in),
        ):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
                finally:
                    if out.pending:  # (an alert too, before the refusal propagates)
                        peer_in.write(out.read())
        if all(done.values()):
            # The server's last flight (TLS 1.3's session tickets), read as a client would.
            with suppress(ssl.SSLWantReadError):
                client.read(1)
            return
    raise ssl.SSLError("the handshake did not complete")


def _check_keystore_change(settings: SslSettings, old: _Keystore, new: _Keystore) -> None:
    """Kafka's SslFactory checks of a keystore changed at run time (`check_change`: each entry's
    subject unless `ssl.allow.dn.changes`, its alternative names unless
    `ssl.allow.san.changes`, as many entries unless both), with its messages; when a PKCS12
    store's entries cannot be listed, the keys' entries alone."""
    from wirebroker.certificate_entries import check_change

    if old.entries is not None and new.entries is not None:
        entries = old.entries, new.entries
    else:
        entries = (old.key_entry,), (new.key_entry,)
    try:
        check_change(
            *entries,
            allow_dn_changes=(settings.get("ssl.allow.dn.changes") or "").lower() == "true",
            allow_san_changes=(settings.get("ssl.allow.san.changes") or "").lower() == "true",
        )
    except ConfigError as e:
        raise ConfigError(f"{_FAILED}{_CONFIG_EXCEPTION}{e}") from None


def inter_broker_client_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The context of this broker's connections to its peers, or None when they are plaintext:
    the inter-broker listener's keystore as client certificate, its truststore, and hostname
    verification unless `ssl.endpoint.identification.algorithm` is empty."""
    listener = config.inter_broker_listener()
    if listener is None or not config.uses_tls(listener):
        return None
    return client_context(_Settings(config, listener))


def client_context(settings: SslSettings) -> ssl.SSLContext:
    """A client's context: the keystore (if any) as client certificate, the truststore (else
    the system's), and hostname verification unless `ssl.endpoint.identification.algorithm`
    is empty."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_common(context, settings)
    context.check_hostname = (
        settings.get("ssl.endpoint.identification.algorithm") or ""
    ).lower() == "https"
    _load_keystore(context, settings)
    _load_truststore(context, settings)
    return context


def _apply_common(context: ssl.SSLContext, settings: SslSettings) -> None:
    names = _items(settings, "ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]
    unknown = [n for n in names if n not in _PROTOCOLS]
    if unknown:
        raise ConfigError(
            f"{settings.name('ssl.enabled.protocols')}: unknown {', '.join(unknown)}; "
            f"use {', '.join(_PROTOCOLS)}"
        )
    versions = sorted(_PROTOCOLS[n] for n in names)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    suites = _items(settings, "ssl.cipher.suites")
    if suites:
        known = _openssl_ciphers()
        names = [_openssl_cipher(s) for s in suites]
        unknown = [s for s, n in zip(suites, names, strict=True) if n not in known]
        if unknown:
            raise ConfigError(
                f"{settings.name('ssl.cipher.suites')}: {', '.join(unknown)} is not a TLS 1.2 suite OpenSSL knows "
                "(TLS 1.3 suites cannot be restricted)"
            )
        context.set_ciphers(":".join(names))


def _openssl_ciphers() -> set[str]:
    every = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    every.set_ciphers("ALL:@SECLEVEL=0")
    return {c["name"] for c in every.get_ciphers() if c["protocol"] != "TLSv1.3"}


def _openssl_cipher(name: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name (as Java, so Kafka, names
    them), e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name  # already OpenSSL's
    exchange, _, cipher = name[4:].partition("_WITH_")
    cipher = re.sub(r"^AES_(\d+)", r"AES\1", cipher).replace("_CBC", "")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = [] if exchange == "RSA" else [exchange.replace("_", "-")]
    return "-".join([*parts, cipher.replace("_", "-")])


# keystores and truststores ---------------------------------------------------------------------
class StoreLoadError(ConfigError):
    """A keystore or truststore file that cannot be loaded (missing, not a store of its type,
    the wrong password), with the words of the exception Kafka's SslFactory raises for it
    (`kafka`), which its refusal of a changed store quotes."""

    def __init__(self, message: str, kafka: str) -> None:
        super().__init__(message)
        self.kafka = kafka


def _load_failure(settings: SslSettings, store: str, message: str) -> StoreLoadError:
    """`message` about the file of `store` (keystore or truststore), with Kafka's words for a
    file it cannot load: "Failed to load SSL keystore <path> of type <type>" (KeyStore.load's
    failure; its truststores' too), or "Failed to load PEM SSL keystore <path>"."""
    path = settings.get(f"ssl.{store}.location")
    kind = settings.get(f"ssl.{store}.type") or "JKS"
    if kind.upper() == "PEM":
        kafka = f"{_INVALID_CONFIGURATION}Failed to load PEM SSL keystore {path}"
    else:
        kafka = f"{_KAFKA_EXCEPTION}Failed to load SSL keystore {path} of type {kind}"
    return StoreLoadError(message, kafka)


@contextmanager
def _loading(settings: SslSettings, store: str) -> Iterator[None]:
    """A ConfigError while the file of `store` is read and parsed, as `_load_failure`."""
    try:
        yield
    except StoreLoadError:
        raise
    except ConfigError as e:
        raise _load_failure(settings, store, str(e)) from None


def _read(settings: SslSettings, key: str) -> bytes:
    location = settings.get(key)
    assert location is not None
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise ConfigError(f"{settings.name(key)}={location}: {e.strerror}") from None


def _store_type(settings: SslSettings, key: str, data: bytes) -> str:
    kind = (settings.get(key) or "JKS").upper()
    key = settings.name(key)
    if kind != "PEM" and data.lstrip().startswith(b"-----BEGIN"):
        raise ConfigError(f"{key}: the store is PEM text: set {key}=PEM")
    if kind not in ("JKS", "PKCS12", "JCEKS"):
        return kind
    jceks = data.startswith(_JCEKS_MAGIC)
    if kind == "JCEKS":  # Java's JceKeyStore reads JKS files too (`wirebroker.jks` both)
        if not jceks and not data.startswith(_JKS_MAGIC):
            raise ConfigError(f"{key}=JCEKS: the store is neither a JCEKS nor a JKS store")
        return "JKS"
    if jceks:  # neither Java's JKS nor its PKCS12 store reads one
        raise ConfigError(f"{key}={kind}: the store is a JCEKS store: set {key}=JCEKS")
    # Java reads a PKCS12 file given as JKS and a JKS file given as PKCS12, so Kafka does
    # (keystore.type.compat): the file's own format decides.
    return "JKS" if data.startswith(_JKS_MAGIC) else "PKCS12"


def _jks(settings: SslSettings, store: str, data: bytes, password: str | None) -> JksStore:
    """The JKS store `data`, the file `store` (a location key) names, read with `password`
    (None: not checked)."""
    from wirebroker.jks import CONVERT, JksError, JksPasswordError, read_jks

    where = f"{settings.name(store)}={settings.get(store)}"
    try:
        return read_jks(data, password)
    except JksPasswordError as e:
        raise ConfigError(f"{where}: {e}") from None
    except JksError as e:
        raise ConfigError(f"{where}: {e} (or convert it to PKCS12: `{CONVERT}`)") from None


def _password(settings: SslSettings, key: str) -> bytes | None:
    value = settings.get(key)
    return value.encode() if value is not None else None


def _pem_blocks(data: bytes, kinds: Sequence[bytes]) -> list[bytes]:
    return [m[0] for m in _PEM_BLOCK.finditer(data) if m[1] in kinds]


class _Keystore(NamedTuple):
    """What a loaded keystore's changes are checked by (`wirebroker.certificate_entries`): its
    key's entry, and its entries with a certificate as Java lists them (a PEM keystore's one
    entry, a JKS or PKCS12 one's key entries with a chain and trusted certificates; None when
    not listed)."""

    key_entry: CertificateEntry
    entries: tuple[CertificateEntry, ...] | None


#: The alias of a PEM keystore's one entry (Kafka's PemStore).
_PEM_ALIAS = "kafka"


def _load_keystore(
    context: ssl.SSLContext, settings: SslSettings, *, list_entries: bool = False
) -> _Keystore | None:
    """Load the keystore's key and certificate chain, if there is a keystore (None without);
    of a store holding several keys, the one of each key type Kafka's key manager would choose
    (`_chosen_keys`). `list_entries`: list a PKCS12 store's entries too (`wirebroker.pkcs12`:
    its certificates are decrypted again), which the other types give for nothing."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    from wirebroker.certificate_entries import CertificateEntry

    key_password = _password(settings, "ssl.key.password")
    chain_text, key_text = (
        settings.get("ssl.keystore.certificate.chain"),
        settings.get("ssl.keystore.key"),
    )
    entries: tuple[CertificateEntry, ...] | None
    keys: list[_Key] | None = None  # a store's several keys, in the order Java lists them
    if chain_text and key_text:
        certs = _pem_certificates(
            chain_text.encode(), settings.name("ssl.keystore.certificate.chain")
        )
        key = _pem_key(key_text.encode(), key_password, settings.name("ssl.keystore.key"), settings)
        key_entry = CertificateEntry(_PEM_ALIAS, certs[0])
        entries = (key_entry,)
    elif settings.get("ssl.keystore.location"):
        with _loading(settings, "keystore"):
            data = _read(settings, "ssl.keystore.location")
            kind = _store_type(settings, "ssl.keystore.type", data)
        if kind == "PEM":
            where = settings.name("ssl.keystore.location")
            with _loading(settings, "keystore"):
                certs = _pem_certificates(data, where)
                key = _pem_key(data, key_password, where, settings)
            key_entry = CertificateEntry(_PEM_ALIAS, certs[0])
            entries = (key_entry,)
        elif kind == "PKCS12":
            password = _password(settings, "ssl.keystore.password")
            try:
                store = pkcs12.load_pkcs12(data, password)
            except ValueError as e:
                raise _load_failure(
                    settings,
                    "keystore",
                    f"{settings.name('ssl.keystore.location')}: cannot read the PKCS12 store "
                    f"({settings.name('ssl.keystore.password')}?): {e}",
                ) from None
            if store.key is None or store.cert is None:
                raise ConfigError(
                    f"{settings.name('ssl.keystore.location')}: the PKCS12 store holds no "
                    "private key"
                )
            entries = _pkcs12_entries(settings, data, password) if list_entries else None
            keys = _pkcs12_keys(settings, data, password, key_password or password)
            if keys is None:  # its entries cannot be listed: its first key as cryptography reads it
                key = store.key
                certs = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
                name = (store.cert.friendly_name or b"").decode("utf-8", "replace").lower()
                key_entry = CertificateEntry(name, certs[0])
            else:
                _, key, certs = keys[0]
                key_entry = CertificateEntry(keys[0][0], certs[0])
        elif kind == "JKS":
            keys, entries = _jks_keys(settings, data, key_password)
            _, key, certs = keys[0]
            key_entry = CertificateEntry(keys[0][0], certs[0])
        else:
            raise ConfigError(
                f"{settings.name('ssl.keystore.type')}={kind} is not supported; use JKS, PKCS12, "
                "JCEKS or PEM"
            )
    else:
        return None
    if keys is not None and len(keys) > 1:
        chosen = _chosen_keys(keys)
        _, key, certs = chosen[0]
        key_entry = CertificateEntry(chosen[0][0], certs[0])
        for _, other, chain in chosen[1:]:
            _load_key(context, other, chain)
    _load_key(context, key, certs)
    return _Keystore(key_entry, entries)


#: A key of a keystore: its alias, the private key and its certificate chain.
_Key = tuple[str, Any, list[Any]]
#: Java's names of the key algorithms (PublicKey.getAlgorithm) its key managers choose keys
#: by, by the OID of a certificate's public key algorithm.
_JAVA_KEY_TYPES = {
    "1.2.840.113549.1.1.1": "RSA",
    "1.2.840.113549.1.1.10": "RSASSA-PSS",
    "1.2.840.10045.2.1": "EC",
    "1.3.101.112": "EdDSA",
    "1.3.101.113": "EdDSA",
    "1.2.840.10040.4.1": "DSA",
}


def _chosen_keys(keys: list[_Key]) -> list[_Key]:
    """The keys Kafka's key manager (Java's SunX509, `ssl.keymanager.algorithm`'s default)
    serves of a store holding several: for each key type a handshake asks for, the first of its
    aliases in the order of the manager's HashMap of them. OpenSSL, given one key of each type,
    then chooses among them by the client's signature algorithms and cipher suites, as Java's
    handshake asks for a type."""
    from wirebroker.java_hashing import hash_set_order, string_hash

    by_alias = {alias: (alias, key, chain) for alias, key, chain in keys}
    chosen: dict[str, _Key] = {}
    for alias in hash_set_order(list(by_alias), string_hash):
        certificate = by_alias[alias][2][0]
        oid = certificate.public_key_algorithm_oid.dotted_string
        chosen.setdefault(_JAVA_KEY_TYPES.get(oid, oid), by_alias[alias])
    return list(chosen.values())


def _load_key(context: ssl.SSLContext, key: Any, certs: list[Any]) -> None:
    """Load a key and its chain into `context` (OpenSSL keeps one of each key type). The ssl
    module loads keys only from files: the key goes to a private temporary file, encrypted
    with a password used once, so it never lies on disk in the clear."""
    from cryptography.hazmat.primitives import serialization

    once = secrets.token_hex(16).encode()
    with tempfile.TemporaryDirectory(prefix="wirebroker-tls-") as directory:
        path = Path(directory) / "keystore.pem"
        path.touch(mode=0o600)
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(once),
            )
            + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
        )
        try:
            context.load_cert_chain(path, password=once)
        except ssl.SSLError as e:
            raise ConfigError(f"the keystore's key does not fit its certificate: {e}") from None


def _pkcs12_keys(
    settings: SslSettings, data: bytes, password: bytes | None, key_password: bytes | None
) -> list[_Key] | None:
    """A PKCS12 keystore's keys with their chains as Java's PKCS12KeyStore makes them (a key's
    certificate and its issuers among the store's certificates, not every certificate of the
    store), each decrypted with `key_password` (Kafka's: `ssl.key.password`, else the store's);
    None when its entries cannot be listed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from wirebroker.pkcs12 import key_entries

    try:
        listed = key_entries(data, password)
    except ValueError:  # (a Pkcs12Error, logged where the entries are listed)
        return None
    if not listed:
        return None
    keys = []
    for entry in listed:
        try:
            key = serialization.load_der_private_key(entry.encrypted_key, key_password)
        except (ValueError, TypeError) as e:
            raise ConfigError(
                f"{settings.name('ssl.keystore.location')}: cannot read the key "
                f"{entry.alias!r} ({settings.name('ssl.key.password')}?): {e}"
            ) from None
        keys.append((entry.alias, key, [x509.load_der_x509_certificate(c) for c in entry.chain]))
    return keys


def _pkcs12_entries(
    settings: SslSettings, data: bytes, password: bytes | None
) -> tuple[CertificateEntry, ...] | None:
    """A PKCS12 keystore's entries with a certificate (None, logged, when they cannot be
    listed: its key's certificate alone is then compared)."""
    from cryptography import x509

    from wirebroker.certificate_entries import CertificateEntry
    from wirebroker.pkcs12 import certificate_entries

    try:
        return tuple(
            CertificateEntry(alias, x509.load_der_x509_certificate(der))
            for alias, der in certificate_entries(data, password)
        )
    except ValueError as e:  # (a Pkcs12Error)
        log.info(
            "%s=%s: its entries are not listed (%s), so a keystore replacing it is compared by "
            "its key's certificate alone, whatever its other entries",
            settings.name("ssl.keystore.location"),
            settings.get("ssl.keystore.location"),
            e,
        )
        return None


def _jks_keys(
    settings: SslSettings, data: bytes, key_password: bytes | None
) -> tuple[list[_Key], tuple[CertificateEntry, ...]]:
    """A JKS or JCEKS keystore's keys with their chains, in the order Java lists them, and the
    store's entries with a certificate; each key decrypted with `ssl.key.password`, else the
    store's password, as Kafka's DefaultSslEngineFactory hands it to the key manager, which
    reads every key (one it cannot read refuses the store)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from wirebroker.certificate_entries import CertificateEntry
    from wirebroker.jks import JksError

    location = settings.name("ssl.keystore.location")
    store_password = settings.get("ssl.keystore.password")
    if store_password is None:  # Kafka's message, and what to set
        raise ConfigError(
            "SSL key store is specified, but key store password is not specified: set "
            f"{settings.name('ssl.keystore.password')} (and {settings.name('ssl.key.password')} "
            "if the key's differs)"
        )
    with _loading(settings, "keystore"):
        store = _jks(settings, "ssl.keystore.location", data, store_password)
    password = key_password.decode() if key_password is not None else store_password
    keys: list[_Key] = []
    for entry in store.key_entries():
        try:
            key = serialization.load_der_private_key(entry.key(password), None)
            chain = [x509.load_der_x509_certificate(c) for c in entry.chain]
        except (JksError, ValueError) as e:
            raise ConfigError(
                f"{location}: cannot read the key {entry.alias!r} "
                f"({settings.name('ssl.key.password')}?): {e}"
            ) from None
        if not chain:
            raise ConfigError(f"{location}: the key {entry.alias!r} has no certificate")
        keys.append((entry.alias, key, chain))
    if not keys:
        raise ConfigError(f"{location}: the store holds no private key")
    try:
        entries = tuple(
            CertificateEntry(alias, x509.load_der_x509_certificate(certificate))
            for alias, certificate in store.certificate_entries()
        )
    except ValueError as e:
        raise ConfigError(f"{location}: a certificate cannot be read: {e}") from None
    return keys, entries


def _pem_certificates(data: bytes, where: str) -> list[x509.Certificate]:
    from cryptography import x509

    blocks = _pem_blocks(data, (b"CERTIFICATE",))
    if not blocks:
        raise ConfigError(f"{where}: no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return [x509.load_pem_x509_certificate(b) for b in blocks]


def _pem_key(data: bytes, password: bytes | None, where: str, settings: SslSettings) -> Any:
    from cryptography.hazmat.primitives import serialization

    blocks = _pem_blocks(
        data, (b"PRIVATE KEY", b"ENCRYPTED PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY")
    )
    if not blocks:
        raise ConfigError(f"{where}: no PEM private key (-----BEGIN PRIVATE KEY-----)")
    encrypted = b"ENCRYPTED" in blocks[0].split(b"\n", 1)[0]
    try:
        return serialization.load_pem_private_key(blocks[0], password if encrypted else None)
    except (ValueError, TypeError) as e:
        raise ConfigError(
            f"{where}: cannot read the private key ({settings.name('ssl.key.password')}?): {e}"
        ) from None


def _load_truststore(context: ssl.SSLContext, settings: SslSettings) -> None:
    """Trust the truststore's certificates, or the system's when there is no truststore."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    inline = settings.get("ssl.truststore.certificates")
    if inline:
        pem = b"".join(_pem_blocks(inline.encode(), (b"CERTIFICATE",)))
    elif settings.get("ssl.truststore.location"):
        with _loading(settings, "truststore"):
            data = _read(settings, "ssl.truststore.location")
            kind = _store_type(settings, "ssl.truststore.type", data)
        if kind == "PEM":
            pem = b"".join(_pem_blocks(data, (b"CERTIFICATE",)))
            if not pem:
                raise _load_failure(
                    settings,
                    "truststore",
                    f"{settings.name('ssl.truststore.location')}: no PEM certificate "
                    "(-----BEGIN CERTIFICATE-----)",
                )
        elif kind == "PKCS12":
            try:
                store = pkcs12.load_pkcs12(data, _password(settings, "ssl.truststore.password"))
            except ValueError as e:
                raise _load_failure(
                    settings,
                    "truststore",
                    f"{settings.name('ssl.truststore.location')}: cannot read the PKCS12 store "
                    f"({settings.name('ssl.truststore.password')}?): {e}",
                ) from None
            certs = [c.certificate for c in store.additional_certs]
            if store.cert is not None:
                certs.append(store.cert.certificate)
            pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
        elif kind == "JKS":
            pem = _jks_trusted(settings, data)
        else:
            raise ConfigError(
                f"{settings.name('ssl.truststore.type')}={kind} is not supported; use JKS, "
                "PKCS12, JCEKS or PEM"
            )
    else:
        server = context.protocol == ssl.PROTOCOL_TLS_SERVER
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH)
        return
    if not pem:
        raise ConfigError("the truststore holds no certificate")
    context.load_verify_locations(cadata=pem.decode())


def _jks_trusted(settings: SslSettings, data: bytes) -> bytes:
    """A JKS truststore's certificates in PEM: its trusted certificate entries and its private
    key entries' own certificates, as Java's TrustStoreUtil takes them; its integrity checked
    when `ssl.truststore.password` is set (Java reads one without)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    password = settings.get("ssl.truststore.password")
    with _loading(settings, "truststore"):
        store = _jks(settings, "ssl.truststore.location", data, password)
    ders = [*store.trusted_certs, *(e.chain[0] for e in store.private_keys if e.chain)]
    try:
        certs = [x509.load_der_x509_certificate(d) for d in ders]
    except ValueError as e:
        raise ConfigError(
            f"{settings.get('ssl.truststore.location')}: a certificate cannot be read: {e}"
        ) from None
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


# principals --------------------------------------------------------------------------------------
_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)"
    r"/(?P<case>[LU]?))[ \t]*(?:[,\n]\s*|$)"  # rules end at a comma or a line end
)


class _Rule:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("pattern", "replacement", "case")

    def __init__(self, pattern: re.Pattern[str] | None, replacement: str, case: str) -> None:
        self.pattern = pattern  # None: DEFAULT
        self.replacement = replacement
        self.case = case

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        # Java's $1 is Python's \g<1>; an escaped slash is a slash.
        replacement = re.sub(r"\$(\d)", r"\\g<\1>", self.replacement.replace("\\/", "/"))
        name = self.pattern.sub(replacement, dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


class PrincipalMapper:
    """`ssl.principal.mapping.rules`: the first rule whose pattern matches the whole DN names
    the user; DEFAULT is the DN itself. A DN no rule matches is refused, as in Kafka."""

    def __init__(self, text: str | None) -> None:
        self.text = text or "DEFAULT"
        self.rules: list[_Rule] = []
        position = 0
        while position < len(self.text):
            m = _RULE.match(self.text, position)
            if not m or m.end() == position:
                raise ConfigError(
                    f"ssl.principal.mapping.rules: cannot parse {self.text[position:]!r}; "
                    "expected DEFAULT or RULE:pattern/replacement/[LU]"
                )
            if m["default"]:
                self.rules.append(_Rule(None, "", ""))
            else:
                try:
                    pattern = re.compile(m["pattern"])
                except re.error as e:
                    raise ConfigError(f"ssl.principal.mapping.rules: {e}") from None
                self.rules.append(_Rule(pattern, m["replacement"], m["case"]))
            position = m.end()

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise ValueError(f"no ssl.principal.mapping.rules rule applies to {dn!r}")


def subject_dn(der: bytes) -> str:
    """A certificate's subject in RFC 2253 form, as Java's X500Principal.getName() prints it."""
    from cryptography import x509

    from wirebroker.certificate_entries import rfc2253_name, subject_rdns

    return rfc2253_name(subject_rdns(x509.load_der_x509_certificate(der)))


# the transport -----------------------------------------------------------------------------------
class TlsTransport:
    """An accepted connection's byte stream through TLS; the interface of `PlainTransport`."""

    __slots__ = ("fd", "principal", "_incoming", "_outgoing", "_ssl")
    #: A short read may end at the peer's close_notify, the socket still open: read again.
    short_read_drains = False

    def __init__(self, fd: int, context: ssl.SSLContext) -> None:
        self.fd = fd
        self.principal = ANONYMOUS
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self, timeout_s: float, mapper: PrincipalMapper) -> None:
        """Complete the server handshake and learn the client's principal."""
        try:
            with trio.fail_after(timeout_s):
                while True:
                    try:
                        self._ssl.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        await self._flush()
                        await self._fill()
                await self._flush()
        except ssl.SSLError as e:
            # Tell the client why (a TLS alert), if it still listens.
            with trio.move_on_after(1):
                await self._flush()
            raise HandshakeFailed(f"TLS handshake failed: {e.reason or e}") from None
        except trio.TooSlowError:
            raise HandshakeFailed(f"TLS handshake not done in {timeout_s:.0f} s") from None
        except (OSError, EOFError) as e:
            raise HandshakeFailed(f"TLS handshake failed: {e}") from None
        der = self._ssl.getpeercert(binary_form=True)
        if der:
            try:
                self.principal = "User:" + mapper.name(subject_dn(der))
            except ValueError as e:
                raise HandshakeFailed(str(e)) from None

    async def _fill(self) -> None:
        while True:
            try:
                data = os.read(self.fd, _RECEIVE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.fd)
                continue
            if not data:
                raise EOFError("the peer closed the connection")
            self._incoming.write(data)
            return

    def receive_into(self, buffer: memoryview) -> int:
        """Decrypt into `buffer`; 0 when the peer closed, BlockingIOError when nothing is there.

        OpenSSL hands out one record (16 KiB at most) a call: this goes on while the socket
        has bytes, so a large request costs one pass of the connection loop, not one a record.
        """
        total, size = 0, len(buffer)
        while total < size:
            try:
                n: int = self._ssl.read(size - total, buffer[total:])  # type: ignore[assignment]
                if not n:  # the peer's close_notify
                    return total
                total += n
            except ssl.SSLWantReadError:
                try:
                    data = os.read(self.fd, _RECEIVE)
                except BlockingIOError:
                    if total:
                        return total
                    raise  # nothing at all: the caller waits and calls again
                if not data:
                    return total  # at 0, the peer closed; else the next call sees it
                self._incoming.write(data)
            except ssl.SSLZeroReturnError:
                return total
            except ssl.SSLError as e:  # a corrupt record: this connection ends, quietly
                raise ConnectionResetError(f"TLS error: {e.reason or e}") from None
        return total

    async def send_frames(self, responses: Sequence[Sequence[Any]]) -> None:
        """Encrypt and send several responses, each its size prefix and its chunks, in order."""
        plain = bytearray()
        for chunks in responses:
            chunks = flatten(chunks)
            sizes = [chunk_size(c) for c in chunks]
            plain += _SIZE.pack(sum(sizes))
            for chunk, size in zip(chunks, sizes, strict=True):
                if isinstance(chunk, bytes | bytearray | memoryview):
                    plain += chunk
                else:
                    if not cached(chunk.fd, chunk.position, size):
                        await load_slice(chunk)
                    position, end = chunk.position, chunk.position + size
                    while position < end:
                        piece = os.pread(chunk.fd, min(_PIECE, end - position), position)
                        if not piece:
                            raise OSError(f"file slice ended {end - position} bytes early")
                        plain += piece
                        position += len(piece)
                        if len(plain) >= _PIECE:
                            await self._send(plain)
                            plain = bytearray()
                if len(plain) >= _PIECE:
                    await self._send(plain)
                    plain = bytearray()
        await self._send(plain)

    async def _send(self, plain: bytearray) -> None:
        if plain:
            self._ssl.write(plain)
        await self._flush()

    async def _flush(self) -> None:
        view = memoryview(self._outgoing.read())
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.fd)
