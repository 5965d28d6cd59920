"""The Kerberos principal of the ZooKeeper server a GSSAPI login asks a service ticket for, as
ZooKeeper 3.8's client finds it (SaslServerPrincipal, then SecurityUtils.createSaslClient),
from the system properties it reads (`system_properties`):

- `zookeeper.server.principal`: the server's principal, whole (`zookeeper/zk1.example.com@REALM`),
  taken as it is: nothing is looked up.
- otherwise `<service>/<host>`: the service `zookeeper.sasl.client.username` (default
  `zookeeper`); the host the connect string's name of the server (an IP address: its name, a
  reverse lookup confirmed forward, as Java's getHostName), canonicalized unless
  `zookeeper.sasl.client.canonicalize.hostname` is false (default true, read as Java's
  Boolean.parseBoolean: `true` in any case, anything else false): the address connected to
  (the name looked up forward) looked up in reverse and confirmed forward; the name found, if
  any, replaces the host.
- a principal without `@REALM` takes `zookeeper.server.realm`, by default the realm of the
  client's own principal.

The client then asks for the ticket of `<service>@<host>` as a host-based service, the realm
left to Kerberos (krb5.conf's [domain_realm], else the default realm), as Java's GSSAPI client
does: the principal's realm has only to be well formed (`service[/host]@realm`, no other `/` or
`@`), else ZooKeeper's "Malformed Kerberos name" stops the start. The lookups may wait on DNS:
`principal` runs in kazoo's connection thread, never on the event loop.
"""

from __future__ import annotations

from wirebroker.sasl.kerberos import service_host
from wirebroker.sasl.kerberos_names import KerberosName
from wirebroker.system_properties import system_property

ZK_SERVER_PRINCIPAL = "zookeeper.server.principal"
ZK_SERVER_REALM = "zookeeper.server.realm"
ZK_CANONICALIZE_HOSTNAME = "zookeeper.sasl.client.canonicalize.hostname"
#: The service of ZooKeeper's Kerberos principal (ZooKeeper's ZKClientConfig).
ZK_SASL_SERVICE = "zookeeper.sasl.client.username"
DEFAULT_SASL_SERVICE = "zookeeper"


class ServerPrincipal:
    """How one login names the ZooKeeper server's principal."""

    __slots__ = ("configured", "service", "realm", "canonicalize")

    def __init__(
        self, configured: str | None, service: str, realm: str | None, canonicalize: bool
    ) -> None:
        #: `zookeeper.server.principal`, when set: the principal of every server.
        self.configured = configured
        self.service = service
        #: The realm a principal without one takes (None: the client's principal has none).
        self.realm = realm
        self.canonicalize = canonicalize
        gss_target(self.configured or f"{service}/<host>", realm)  # refused now, if malformed

    @classmethod
    def from_system_properties(cls, client_principal: str) -> ServerPrincipal:
        """The system properties' setting, for a login as `client_principal`; ValueError with
        ZooKeeper's message when the principal they make is malformed."""
        realm = system_property(ZK_SERVER_REALM)
        if realm is None and "@" in client_principal:
            realm = client_principal.rpartition("@")[2]
        return cls(
            system_property(ZK_SERVER_PRINCIPAL),
            system_property(ZK_SASL_SERVICE) or DEFAULT_SASL_SERVICE,
            realm,
            (system_property(ZK_CANONICALIZE_HOSTNAME) or "true").lower() == "true",
        )

    def principal(self, host: str, address: str) -> str:
        """The principal of the server named `host` in the connect string, connected to at
        `address`. May wait on DNS."""
        if self.configured is not None:
            name = self.configured
        else:
            name = f"{self.service}/{server_host(host, address, self.canonicalize)}"
        if "@" in name or self.realm is None:
            return name
        return f"{name}@{self.realm}"

    def describe(self) -> str:
        if self.configured is not None:
            return f"server principal {self.configured!r}"
        return f"service {self.service!r}"


def server_host(host: str, address: str, canonicalize: bool) -> str:
    """The host of the service principal of the server named `host`, connected to at
    `address`, as ZooKeeper's SaslServerPrincipal. May wait on DNS."""
    name = service_host(host)
    if canonicalize:
        canonical = service_host(address)
        if canonical != address:
            name = canonical
    return name


def gss_target(principal: str, realm: str | None = None) -> tuple[str, str | None]:
    """The service and host (None: without one) of `principal`, as ZooKeeper's KerberosName
    (the same as Kafka's) reads them, a principal without a realm read as if it had `realm`;
    ValueError with ZooKeeper's message when it is malformed."""
    name = KerberosName.parse(principal if "@" in principal else f"{principal}@{realm or ''}")
    return name.service_name, name.host_name
