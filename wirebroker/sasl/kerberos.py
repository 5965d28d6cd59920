"""SASL/GSSAPI (Kerberos V5, RFC 4752): the server a listener authenticates clients with, as
Kafka's (Java's GssKrb5Server under its SaslServerCallbackHandler), through the optional
`gssapi` package (python-gssapi, binding MIT krb5: `pip install 'wirebroker[gssapi]'`).

The listener's `Krb5LoginModule` JAAS entry names the service principal (`kafka/host@REALM`)
and the keytab holding its keys; each exchange accepts the client's security context with
them, then runs RFC 4752's security-layer negotiation: the server sends, wrapped, the layers it
offers (Kafka: none, QOP `auth`) and its maximum buffer; the client answers, wrapped, the layer
it chose and an authorization id. As Kafka, the authorization id is not checked (the
authenticated principal is the one used); the principal is `User:<short name>`, the short name
given by `sasl.kerberos.principal.to.local.rules` (`kerberos_names`); for a principal no rule
maps, the exchange ends as a success and the connection is closed at the client's next
request, as Kafka's (its principal builder fails on the first request after the exchange).

Kafka's retriable Kerberos errors (its KerberosError: a client or ticket not yet valid, a
replayed authenticator) raise `SaslRetriable`, on either side; so does, on the client side, a
missing credential that is no Kerberos error (Kafka's `GSSException.NO_CRED` rule).

Every GSS-API call may read the keytab or write the replay cache: the authenticator runs
`evaluate` in a worker thread (`blocking`). `GssapiClient` is this broker's login to its peers
(`sasl.mechanism.inter.broker.protocol=GSSAPI`), with the same principal and keytab.
"""

from __future__ import annotations

import ipaddress
import socket
from types import ModuleType
from typing import TYPE_CHECKING, Any

from wirebroker.sasl.kerberos_names import KerberosShortNamer, NoMatchingRule
from wirebroker.sasl.mechanism import SaslFailure, SaslPrincipalFailure, SaslRetriable
from wirebroker.sasl.settings import GSSAPI, KRB5_LOGIN_MODULE

if TYPE_CHECKING:
    from wirebroker.sasl.settings import JaasEntry

#: RFC 4752's security layers: the one Kafka offers is "no security layer".
NO_SECURITY_LAYER = 1
#: The maximum buffer the server announces (Java's default `javax.security.sasl.maxbuffer`).
MAX_BUFFER = 65536
#: MIT's com_err table of Kerberos errors (ERROR_TABLE_BASE_krb5, as an unsigned minor
#: status): minor `KRB5_ERRORS + n` is the Kerberos protocol error n (RFC 4120 7.5.9) for n
#: below 128 (Java's KrbException return code), a library error (a keytab without the
#: principal) above.
KRB5_ERRORS = 0x96C73A00
#: Kafka's retriable KerberosError codes: KDC_ERR_CLIENT_NOTYET, KRB_AP_ERR_TKT_NYV,
#: KRB_AP_ERR_REPEAT.
RETRIABLE_KERBEROS_ERRORS = frozenset({21, 33, 34})
INSTALL = (
    "GSSAPI needs the gssapi package (python-gssapi, MIT Kerberos): "
    "pip install 'wirebroker[gssapi]' (it builds against MIT Kerberos: apt-get install "
    "libkrb5-dev, or your system's krb5 development package)"
)


def load_gssapi() -> ModuleType:
    """The gssapi package; ImportError saying what to install when it is missing."""
    try:
        import gssapi
    except ImportError as e:
        raise ImportError(f"{INSTALL} ({e})") from None
    return gssapi


def gss_failure(gssapi: Any, e: Exception, *, client: bool) -> SaslFailure:
    """The SaslFailure of a GSSError `e`: SaslRetriable as Kafka's KerberosError says (for a
    `client`, also a missing credential whose minor status is not a Kerberos error: where
    Java's login would already have refused a keytab without the principal, MIT's reports it
    here, and it is no transient failure)."""
    code = (getattr(e, "min_code", 0) & 0xFFFFFFFF) - KRB5_ERRORS
    if code in RETRIABLE_KERBEROS_ERRORS or (
        client and isinstance(e, gssapi.exceptions.MissingCredentialsError) and not 0 <= code < 256
    ):
        return SaslRetriable(f"GSS-API: {e} (Kafka's retriable Kerberos error)")
    return SaslFailure(f"GSS-API: {e}")


def service_host(host: str) -> str:
    """The host whose service ticket a login to `host` asks for, as Kafka's client: the
    SaslChannelBuilder passes `socket.getInetAddress().getHostName()`, the name connected to
    as given, or, for an IP address, Java's reverse lookup of it when that name resolves back
    to the address (else the address itself). May wait on DNS: call it from a worker thread."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    try:
        name = socket.gethostbyaddr(host)[0]
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return host
    resolved = {ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos}
    return name if address in resolved else host


class KerberosService:
    """A listener's Kerberos identity: its service principal, the keytab with its keys, and how
    client principals become short names."""

    __slots__ = ("principal", "keytab", "service_name", "short_namer", "_default_realm")

    def __init__(
        self, principal: str, keytab: str, service_name: str, short_namer: KerberosShortNamer
    ) -> None:
        self.principal = principal
        self.keytab = keytab
        self.service_name = service_name
        self.short_namer = short_namer
        self._default_realm: str | None = None

    @classmethod
    def from_jaas(
        cls, entry: JaasEntry, key: str, service_name: str, short_namer: KerberosShortNamer
    ) -> KerberosService:
        """From the listener's `Krb5LoginModule` JAAS entry (`key` is the config key it came
        from); ValueError saying what to set when its options cannot accept clients."""
        options = entry.options
        example = (
            f"{KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true "
            'keyTab="/etc/security/keytabs/kafka.keytab" principal="kafka/host@REALM";'
        )
        for option in ("useKeyTab", "storeKey"):
            if options.get(option, "false").lower() != "true":
                raise ValueError(
                    f"{key}: a broker accepts Kerberos clients with the keys of its keytab: "
                    f"set {option}=true, e.g. {example}"
                )
        keytab, principal = options.get("keyTab"), options.get("principal")
        if not keytab or not principal:
            raise ValueError(f"{key}: set keyTab and principal, e.g. {example}")
        return cls(principal, keytab, service_name, short_namer)

    def default_realm(self, gssapi: Any) -> str:
        """The Kerberos configuration's default realm, "" without one (as Kafka)."""
        if self._default_realm is None:
            try:
                name = gssapi.Name("x", gssapi.NameType.kerberos_principal)
                canonical = str(name.canonicalize(gssapi.MechType.kerberos))
                self._default_realm = canonical.partition("@")[2]
            except gssapi.exceptions.GSSError:
                self._default_realm = ""
        return self._default_realm


class GssapiServer:
    """One GSSAPI exchange: the security context, then the security layer."""

    mechanism = GSSAPI
    expires_ms: int | None = None  # as Kafka: the session is bounded by connections.max.reauth.ms
    blocking = True

    def __init__(self, service: KerberosService) -> None:
        self._service = service
        self._gssapi = load_gssapi()
        self._context: Any = None
        self._step = "context"  # then "layers", "chosen", "done"
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        gssapi = self._gssapi
        try:
            if self._step == "context":
                return self._accept(token)
            if self._step == "layers":
                if token:
                    raise SaslFailure("Handshake expecting no response data from server")
                self._step = "chosen"
                offer = bytes([NO_SECURITY_LAYER]) + MAX_BUFFER.to_bytes(3, "big")
                return bytes(self._context.wrap(offer, False).message)
            if self._step == "chosen":
                return self._chosen(bytes(self._context.unwrap(token).message))
        except gssapi.exceptions.GSSError as e:
            raise gss_failure(gssapi, e, client=False) from None
        raise SaslFailure("Unexpected token after SASL/GSSAPI authentication")

    def _accept(self, token: bytes) -> bytes:
        gssapi = self._gssapi
        if self._context is None:
            service = self._service
            credentials = gssapi.Credentials(
                name=gssapi.Name(service.principal, gssapi.NameType.kerberos_principal),
                usage="accept",
                store={"keytab": service.keytab},
            )
            self._context = gssapi.SecurityContext(creds=credentials, usage="accept")
        answer = self._context.step(token)
        if self._context.complete:
            self._step = "layers"
            self.username = str(self._context.initiator_name)
        return bytes(answer or b"")

    def _chosen(self, message: bytes) -> bytes:
        if len(message) < 4:
            raise SaslFailure("Final handshake failed: the client's answer is shorter than 4 bytes")
        if not message[0] & NO_SECURITY_LAYER or message[0] & ~NO_SECURITY_LAYER:
            raise SaslFailure(f"Client selected unsupported protection: {message[0]}")
        principal = self.username
        assert principal is not None
        service = self._service
        try:
            self.username = service.short_namer.short_name(
                principal, service.default_realm(self._gssapi)
            )
        except (NoMatchingRule, ValueError) as e:
            raise SaslPrincipalFailure(
                f"Failed to set name for '{principal}' based on Kerberos authentication rules: {e}",
                b"",
            ) from None
        self._step = "done"
        self.complete = True
        return b""


class GssapiClient:
    """The client side of one GSSAPI exchange: logs in as `principal` with its keys in `keytab`
    to the service `service_name` on `host` (an IP address: its name, `service_host`). Its tickets are kept in the process's memory
    credential cache of that principal and keytab, shared by its exchanges (a TGT got again
    from the keytab once it expires), as Java keeps them in the login's Subject. `initial` and `evaluate` may
    reach the KDC: call them from a worker thread."""

    mechanism = GSSAPI

    def __init__(self, principal: str, keytab: str, service_name: str, host: str | None) -> None:
        self._gssapi = load_gssapi()
        self._principal = principal
        self._keytab = keytab
        self._service_name = service_name
        self._host = host
        self._context: Any = None
        self.complete = False

    def initial(self) -> bytes:
        gssapi = self._gssapi
        try:
            credentials = gssapi.Credentials(
                name=gssapi.Name(self._principal, gssapi.NameType.kerberos_principal),
                usage="initiate",
                store={
                    "client_keytab": self._keytab,
                    "ccache": f"MEMORY:{self._principal}:{self._keytab}",
                },
            )
            target = self._service_name  # no host: the local host's, as Java's GSS-API
            if self._host is not None:
                target = f"{self._service_name}@{service_host(self._host)}"
            self._context = gssapi.SecurityContext(
                name=gssapi.Name(target, gssapi.NameType.hostbased_service),
                creds=credentials,
                usage="initiate",
                mech=gssapi.MechType.kerberos,
                flags=gssapi.RequirementFlag.mutual_authentication,
            )
            return bytes(self._context.step(b"") or b"")
        except gssapi.exceptions.GSSError as e:
            raise gss_failure(gssapi, e, client=True) from None

    def evaluate(self, challenge: bytes) -> bytes | None:
        gssapi = self._gssapi
        context = self._context
        try:
            if not context.complete:
                return bytes(context.step(challenge) or b"")
            if self.complete:
                if challenge:
                    raise SaslFailure("unexpected SASL/GSSAPI token from the server")
                return None
            offer = bytes(context.unwrap(challenge).message)
        except gssapi.exceptions.GSSError as e:
            raise gss_failure(gssapi, e, client=True) from None
        if len(offer) != 4 or not offer[0] & NO_SECURITY_LAYER:
            raise SaslFailure("the server does not offer SASL/GSSAPI without a security layer")
        self.complete = True
        return bytes(context.wrap(bytes([NO_SECURITY_LAYER, 0, 0, 0]), False).message)
