"""The broker's GSSAPI (Kerberos) login to ZooKeeper: a pure-sasl mechanism, for kazoo's SASL
support, backed by the `gssapi` package through `GssapiClient` (wirebroker.sasl.kerberos), the
same client the brokers log in to each other with.

pure-sasl's own GSSAPI mechanism needs the `kerberos` package (pykerberos), which takes the
client's keys from the process's environment (KRB5_CLIENT_KTNAME, KRB5CCNAME) only; this one
takes them, as Java's Krb5LoginModule does, from the JAAS section's `keyTab` and `principal`
(a credential store: the keytab, a memory credential cache of that principal). It is known to
pure-sasl under a name of its own (`MECHANISM`), leaving its GSSAPI as it is. ZooKeeper's
server (Java's GssKrb5Server) runs RFC 4752's exchange: the security context, then the
security layer, "none" chosen, as Kafka's client chooses.

The server's principal is the one ZooKeeper's client asks for (`server_principal`), found
when the exchange starts, in kazoo's connection thread (it may look the host up in DNS).

A failure of the client side (no key for the principal in the keytab, an unknown service
principal, the KDC unreachable) is kept in `ZkKerberosLogin.failure`, with the server
principal asked for, for the message that stops the start; kazoo only knows it as AUTH_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from puresasl import mechanisms as puresasl_mechanisms

from wirebroker.sasl.kerberos import GssapiClient
from wirebroker.sasl.mechanism import SaslFailure
from wirebroker.zk.server_principal import gss_target

if TYPE_CHECKING:
    from wirebroker.zk.sasl_login import ZkKerberosLogin

#: pure-sasl's name of this mechanism (never on the wire: ZooKeeper's SASL requests carry
#: tokens only, the server choosing GSSAPI by its own JAAS section).
MECHANISM = "GSSAPI/python-gssapi"


class GssapiMechanism(puresasl_mechanisms.Mechanism):
    """pure-sasl's side of one exchange: `GssapiClient` as `login` says, to the host kazoo
    connects to."""

    name = MECHANISM

    def __init__(self, sasl: Any, login: ZkKerberosLogin, **props: Any) -> None:
        super().__init__(sasl, **props)
        self._login = login
        login.failure = None  # a new exchange: an earlier one's reason no longer holds
        server = login.server
        self._server_principal = server.principal(sasl.host, login.server_address or sasl.host)
        service, host = gss_target(self._server_principal, server.realm)
        self._client = GssapiClient(login.principal, login.keytab, service, host)

    def process(self, challenge: bytes | None = None) -> bytes | None:
        try:
            if challenge is None:
                return self._client.initial()
            answer = self._client.evaluate(challenge)
        except SaslFailure as e:
            self._login.failure = f"{e}; the server principal asked for: {self._server_principal}"
            raise
        self.complete = self._client.complete
        return answer


puresasl_mechanisms.mechanisms.setdefault(MECHANISM, GssapiMechanism)
