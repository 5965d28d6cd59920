"""This broker's SASL login to ZooKeeper, found where Kafka's ZooKeeper client finds it, and
the start-up check of `zookeeper.set.acl`.

Kafka (its ZooKeeper client) reads three JVM system properties, here read as
`system_properties` says (an environment variable of the name, or `-D` in `KAFKA_OPTS`):
`java.security.auth.login.config`, the JAAS file; `zookeeper.sasl.clientconfig`, the file's
section to log in with (default `Client`); `zookeeper.sasl.client`, false to turn SASL off. A
broker logs in when the file has that section, as Kafka's JaasUtils.isZkSaslEnabled decides;
a file that cannot be read, or the section with SASL turned off, stops the start with Kafka's
messages. The section holds one of two login modules, both through kazoo's SASL support
(pure-sasl):
- ZooKeeper's DigestLoginModule (`username`, `password`): DIGEST-MD5. The password never
  reaches a log or a message.
- Java's Krb5LoginModule with `useKeyTab=true`, `keyTab` and `principal`: GSSAPI
  (`gssapi_login`, the optional `gssapi` package), to the server principal ZooKeeper's client
  finds (`server_principal`: `zookeeper/<host>`, the host canonicalized, or
  `zookeeper.server.principal`). A ticket cache login (`useTicketCache`, no keytab) is
  refused, saying so.

`zookeeper.set.acl=true` needs a login ZooKeeper can name the znodes' creator by: the JAAS
section, or ZooKeeper client TLS with a keystore (`zookeeper.ssl.client.enable` and
`zookeeper.ssl.keystore.location`); without either the broker does not start, with Kafka's
message (KafkaZkClient.createZkClient).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wirebroker.config import ConfigError
from wirebroker.sasl.jaas_file import jaas_file_path, read_jaas_file
from wirebroker.sasl.kerberos import load_gssapi
from wirebroker.sasl.settings import KRB5_LOGIN_MODULE, JaasError
from wirebroker.system_properties import JAAS_FILE, system_property
from wirebroker.zk.server_principal import ServerPrincipal
from wirebroker.zk.tls import client_auth_configured

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from wirebroker.config import BrokerConfig

ZK_SASL_CLIENT = "zookeeper.sasl.client"
ZK_LOGIN_CONTEXT = "zookeeper.sasl.clientconfig"
DEFAULT_LOGIN_CONTEXT = "Client"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
ZK_SET_ACL = "zookeeper.set.acl"
ZK_SSL_CLIENT_ENABLE = "zookeeper.ssl.client.enable"
ZK_SSL_KEYSTORE_LOCATION = "zookeeper.ssl.keystore.location"


class ZkLogin:
    """A SASL login to ZooKeeper and where it was read (`source`, for messages)."""

    #: Why the client side of the last exchange failed, if it did (a Kerberos login's keytab
    #: without the principal, say): ZooKeeper's refusal alone says AUTH_FAILED.
    failure: str | None = None
    #: Whether the last exchange was refused (kazoo's connection thread then says AUTH_FAILED
    #: and, a moment later, CLOSED: its state alone may already have moved on).
    refused = False
    #: The address of the server of the current exchange (kazoo's connection sets it).
    server_address: str | None = None

    def __init__(self, source: str) -> None:
        #: "section Client of /etc/kafka/jaas.conf": where the login came from, for messages.
        self.source = source

    def sasl_options(self) -> dict[str, Any]:
        """kazoo's `sasl_options` for this login."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def refusal(self) -> str:
        """What a refused login says: AUTH_FAILED, and why when the client side knows."""
        return "AUTH_FAILED" if self.failure is None else f"AUTH_FAILED ({self.failure})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class ZkDigestLogin(ZkLogin):
    """A DIGEST-MD5 login: the user and its password."""

    def __init__(self, username: str, password: str, source: str) -> None:
        super().__init__(source)
        self.username = username
        self._password = password

    def sasl_options(self) -> dict[str, Any]:
        return {"mechanism": "DIGEST-MD5", "username": self.username, "password": self._password}

    def describe(self) -> str:
        return f"user {self.username!r} (DIGEST-MD5, {self.source})"


class ZkKerberosLogin(ZkLogin):
    """A GSSAPI login as `principal` with its keys in `keytab`, to the ZooKeeper server's
    principal as `server` finds it."""

    def __init__(self, principal: str, keytab: str, server: ServerPrincipal, source: str) -> None:
        super().__init__(source)
        self.principal = principal
        self.keytab = keytab
        self.server = server

    def sasl_options(self) -> dict[str, Any]:
        from wirebroker.zk.gssapi_login import MECHANISM

        return {"mechanism": MECHANISM, "service": self.server.service, "login": self}

    def describe(self) -> str:
        return (
            f"principal {self.principal!r} (GSSAPI to {self.server.describe()}, keytab "
            f"{self.keytab}, {self.source})"
        )


def security_properties() -> str:
    """The system properties as Kafka's messages show them (JaasUtils.zkSecuritySysConfigString)."""
    enabled = system_property(ZK_SASL_CLIENT) or "default:true"
    context = system_property(ZK_LOGIN_CONTEXT) or f"default:{DEFAULT_LOGIN_CONTEXT}"
    return (
        f"[{JAAS_FILE}={system_property(JAAS_FILE) or 'null'}, {ZK_SASL_CLIENT}={enabled}, "
        f"{ZK_LOGIN_CONTEXT}={context}]"
    )


def zk_login() -> ZkLogin | None:
    """The login the system properties name, or None (no JAAS file, or no such section in it);
    ConfigError when the file cannot be read or its section cannot be used."""
    setting = system_property(JAAS_FILE)
    if setting is None:
        return None
    context = system_property(ZK_LOGIN_CONTEXT) or DEFAULT_LOGIN_CONTEXT
    try:
        path = jaas_file_path(setting)
        entries = read_jaas_file(path).get(context)
    except (OSError, JaasError) as e:
        raise ConfigError(
            f"Exception while loading Zookeeper JAAS login context {security_properties()}: {e}"
        ) from None
    if entries is None:
        return None
    if (system_property(ZK_SASL_CLIENT) or "true").strip().lower() != "true":
        raise ConfigError(
            f"Exception while determining if ZooKeeper is secure {security_properties()}: JAAS "
            f"configuration is present, but system property {ZK_SASL_CLIENT} is set to false, "
            "which disables SASL in the ZooKeeper client"
        )
    source = f"section {context} of {path}"
    modules = [e.login_module for e in entries]
    _require_pure_sasl()
    if modules == [DIGEST_LOGIN_MODULE]:
        return _digest_login(entries[0].options, source)
    if modules == [KRB5_LOGIN_MODULE]:
        return _kerberos_login(entries[0].options, source)
    raise ConfigError(
        f"{source} has {', '.join(modules) or 'no login module'}: wirebroker logs in to "
        f"ZooKeeper with one {DIGEST_LOGIN_MODULE} (username, password: DIGEST-MD5) or one "
        f"{KRB5_LOGIN_MODULE} (useKeyTab=true, keyTab, principal: GSSAPI)"
    )


def _digest_login(options: Mapping[str, str], source: str) -> ZkDigestLogin:
    missing = [o for o in ("username", "password") if o not in options]
    if missing:
        raise ConfigError(f"{source}: {DIGEST_LOGIN_MODULE} needs {' and '.join(missing)}")
    return ZkDigestLogin(options["username"], options["password"], source)


def _kerberos_login(options: Mapping[str, str], source: str) -> ZkKerberosLogin:
    keytab, principal = options.get("keyTab"), options.get("principal")
    if options.get("useKeyTab", "false").lower() != "true" or not keytab or not principal:
        raise ConfigError(
            f"{source}: wirebroker logs in to ZooKeeper with Kerberos from a keytab only: set "
            f"useKeyTab=true, keyTab and principal, e.g. {KRB5_LOGIN_MODULE} required "
            'useKeyTab=true storeKey=true keyTab="/etc/security/keytabs/kafka.keytab" '
            'principal="kafka/host@REALM";'
        )
    try:
        load_gssapi()
    except ImportError as e:
        raise ConfigError(f"{source}: {e}") from None
    try:
        server = ServerPrincipal.from_system_properties(principal)
    except ValueError as e:
        raise ConfigError(f"{source}: the ZooKeeper server's principal: {e}") from None
    return ZkKerberosLogin(principal, keytab, server, source)


def _require_pure_sasl() -> None:
    from kazoo.protocol.connection import PURESASL_AVAILABLE

    if not PURESASL_AVAILABLE:
        raise ConfigError(
            "a SASL login to ZooKeeper needs the pure-sasl package (pip install pure-sasl)"
        )


def secure_acls(config: BrokerConfig, login: ZkLogin | None) -> bool:
    """`zookeeper.set.acl`; ConfigError, with Kafka's message, when it is true without a login
    (neither `login` nor ZooKeeper client TLS with a keystore)."""
    if not config.get_bool(ZK_SET_ACL):
        return False
    if login is None and not client_auth_configured(config):
        raise ConfigError(
            f"{ZK_SET_ACL} is true, but ZooKeeper client TLS configuration identifying at least "
            f"{ZK_SSL_CLIENT_ENABLE} and {ZK_SSL_KEYSTORE_LOCATION} was not present and the "
            f"verification of the JAAS login file failed {security_properties()}"
        )
    return True


def kazoo_client(hosts: str, login: ZkLogin | None, **options: Any) -> KazooClient:
    """A KazooClient for `hosts` that logs in with `login` (None: no SASL)."""
    from kazoo.client import KazooClient

    kazoo = KazooClient(
        hosts=hosts, sasl_options=login.sasl_options() if login else None, **options
    )
    if login is not None:
        _hook_sasl_exchange(kazoo, login)
    return kazoo


def start_session(kazoo: KazooClient, login: ZkLogin | None, timeout: float) -> None:
    """Start `kazoo` and wait, at most `timeout` seconds, for its session; with a login, for
    ZooKeeper's answer to the login too (kazoo says CONNECTED before its SASL exchange):
    AuthFailedError when refused, kazoo's timeout exception when nothing answered."""
    from kazoo.exceptions import AuthFailedError
    from kazoo.protocol.states import KeeperState

    kazoo.start_async().wait(timeout)
    if login is not None and kazoo.connected:
        # The first request is answered after the SASL exchange, or fails with it.
        kazoo.exists_async("/").get(timeout=timeout)
    if kazoo.client_state == KeeperState.AUTH_FAILED or (login is not None and login.refused):
        raise AuthFailedError()
    if not kazoo.connected:
        raise kazoo.handler.timeout_exception("Connection time-out")


def _hook_sasl_exchange(kazoo: KazooClient, login: ZkLogin) -> None:
    """Before each SASL exchange, tell `login` the address connected to (a Kerberos login's
    server principal is its name); after it, make a refused login AUTH_FAILED. kazoo 2.11
    knows a refusal only as AuthFailedError: ZooKeeper requiring SASL
    (`enforce.auth.schemes=sasl`) answers a wrong password with SESSIONCLOSEDREQUIRESASLAUTH,
    which ends kazoo's connection thread with an unhandled exception, the client then neither
    connected nor failed. kazoo's fix (python-zk/kazoo#810, unreleased) does what this does."""
    from kazoo.exceptions import AuthFailedError, SASLException, SessionClosedRequireSaslError

    connection = kazoo._connection
    authenticate = connection._authenticate_with_sasl

    def checked(host: str, timeout: float) -> None:
        try:
            login.server_address = str(connection._socket.getpeername()[0])
        except (AttributeError, OSError):  # not connected: the exchange fails on its own
            login.server_address = None
        login.refused = False
        try:
            authenticate(host, timeout)
        except AuthFailedError:
            login.refused = True
            raise
        except (SessionClosedRequireSaslError, SASLException) as e:
            login.refused = True
            raise AuthFailedError(type(e).__name__) from e

    connection._authenticate_with_sasl = checked
