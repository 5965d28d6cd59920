"""SASL without a socket: the listener settings, JAAS parsing, PLAIN and SCRAM servers."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import sys
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wirebroker.helpers import server_jaas
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.sasl.jwks import JwksEndpoint, KeySet, parse_jwks
from wirebroker.sasl.kerberos import GssapiClient
from wirebroker.sasl.mechanism import SaslAuthenticationFailed, SaslClient, SaslFailure, SaslServer
from wirebroker.sasl.oauthbearer import (
    SECURED_VALIDATORS,
    InvalidToken,
    OAuthBearerClient,
    OAuthBearerServer,
    SecuredValidator,
    UnsecuredValidator,
    unsecured_token,
)
from wirebroker.sasl.plain import PlainClient, PlainServer
from wirebroker.sasl.scram import ScramClient, ScramCredential, ScramServer
from wirebroker.sasl.settings import (
    JaasError,
    inter_broker_login,
    listener_sasl,
    parse_jaas_config,
)

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)
SASL = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    **server_jaas("SASL_PLAINTEXT", "SCRAM-SHA-512"),
}


def test_sasl_plaintext_listener_is_implemented() -> None:
    config = BrokerConfig.from_properties(SASL)
    settings = listener_sasl(config, "SASL_PLAINTEXT")
    assert settings.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert settings.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    assert settings.max_receive_size == 524288
    assert settings.max_reauth_ms == 0
    renewing = BrokerConfig.from_properties(
        {**SASL, "listener.name.sasl_plaintext.connections.max.reauth.ms": "60000"}
    )
    assert listener_sasl(renewing, "SASL_PLAINTEXT").max_reauth_ms == 60000


def test_listener_mechanisms_and_the_unprefixed_jaas_config() -> None:
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "GSSAPI,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    # GSSAPI enabled without its Krb5LoginModule entry: refused, as Kafka refuses it.
    with pytest.raises(ConfigError, match="Could not find a 'KafkaServer'.*gssapi.sasl.jaas"):
        BrokerConfig.from_properties(props)
    props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] = "PLAIN"
    # As Kafka's server side, the unprefixed sasl.jaas.config is not read for a listener.
    del props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    with pytest.raises(ConfigError, match="unprefixed sasl.jaas.config is not read"):
        BrokerConfig.from_properties({**props, "sasl.jaas.config": PLAIN_JAAS})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"}, "Could not find a 'KafkaServer'"),
        (
            {"listeners": SASL["listeners"], "sasl.enabled.mechanisms": "NOPE"},
            "offers no mechanism wirebroker implements",
        ),
        (  # Kafka's JVM has no login module `x`: its login fails
            {**SASL, "listener.name.sasl_plaintext.plain.sasl.jaas.config": "x required;"},
            r"^listener.name.sasl_plaintext.plain.sasl.jaas.config: No LoginModule found for x "
            r".*: set listener.name.sasl_plaintext.plain.sasl.jaas.config=",
        ),
        (
            {
                "listeners": SASL["listeners"],
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": "x required;",
            },
            "PLAIN",
        ),
        (
            {**SASL, "listener.name.sasl_plaintext.plain.sasl.jaas.config": "a required b=;"},
            "Value not specified for key 'b'.*quote the value",
        ),
        ({**SASL, "connections.max.reauth.ms": "-1"}, "must not be negative"),
        (
            {
                **SASL,
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "com.sun.security.auth.module.JndiLoginModule required;"
                ),
            },
            r"^listener.name.sasl_plaintext.plain.sasl.jaas.config: "
            r"com.sun.security.auth.module.JndiLoginModule is not allowed. Update System property "
            r"'org.apache.kafka.disallowed.login.modules' to allow "
            r"com.sun.security.auth.module.JndiLoginModule$",
        ),
        (
            {
                **SASL,
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                    "com.sun.security.auth.module.LdapLoginModule required;"
                ),
            },
            "LdapLoginModule is not allowed. Update System property "
            "'org.apache.kafka.disallowed.login.modules'",
        ),
        (
            {
                **SASL,
                "zookeeper.connect": "z:2181",
                "security.inter.broker.protocol": "SASL_PLAINTEXT",
            },
            "sasl.mechanism.inter.broker.protocol=GSSAPI must be enabled",
        ),
    ],
)
def test_unusable_sasl_settings_refuse_to_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)


KRB5_JAAS = (
    "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
    'keyTab="/etc/kafka.keytab" principal="kafka/broker1@EXAMPLE.COM";'
)
GSSAPI = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
    "sasl.enabled.mechanisms": "GSSAPI",
    "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": KRB5_JAAS,
}
#: GSSAPI settings are read only with the optional `gssapi` extra installed (`make kerberos`,
#: which `make test` runs); without it the broker refuses them, saying what to install
#: (`test_gssapi_without_the_gssapi_package_says_what_to_install`).
requires_gssapi = pytest.mark.skipif(
    importlib.util.find_spec("gssapi") is None,
    reason="the optional gssapi extra is not installed (`make kerberos` installs it)",
)


@requires_gssapi
def test_gssapi_listener() -> None:
    config = BrokerConfig.from_properties({**GSSAPI, "sasl.kerberos.service.name": "kafka"})
    settings = listener_sasl(config, "SASL_PLAINTEXT")
    assert settings.mechanisms == ("GSSAPI",)
    kerberos = settings.kerberos
    assert kerberos is not None
    assert (kerberos.principal, kerberos.keytab, kerberos.service_name) == (
        "kafka/broker1@EXAMPLE.COM",
        "/etc/kafka.keytab",
        "kafka",
    )
    assert [r.text for r in kerberos.short_namer.rules] == ["DEFAULT"]
    # serviceName in the JAAS entry; the rules per listener and mechanism, as Kafka reads them
    config = BrokerConfig.from_properties(
        {
            **GSSAPI,
            "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": KRB5_JAAS[:-1]
            + ' serviceName="kafka";',
            "sasl.kerberos.principal.to.local.rules": "DEFAULT",
            "listener.name.sasl_plaintext.gssapi.sasl.kerberos.principal.to.local.rules": (
                "RULE:[1:$1]/L, DEFAULT"
            ),
        }
    )
    kerberos = listener_sasl(config, "SASL_PLAINTEXT").kerberos
    assert kerberos is not None and kerberos.service_name == "kafka"
    assert [r.text for r in kerberos.short_namer.rules] == ["RULE:[1:$1]/L", "DEFAULT"]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        # Kafka's KerberosLogin messages
        ({}, "^No serviceName defined in either JAAS or Kafka config$"),
        (
            {
                "sasl.kerberos.service.name": "other",
                "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": KRB5_JAAS[:-1]
                + " serviceName=kafka;",
            },
            "Conflicting serviceName values found in JAAS and Kafka configs value in JAAS file "
            "kafka, value in Kafka config other",
        ),
        (
            {
                "sasl.kerberos.service.name": "kafka",
                "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": KRB5_JAAS.replace(
                    "useKeyTab=true", "useKeyTab=false"
                ),
            },
            "set useKeyTab=true",
        ),
        (
            {
                "sasl.kerberos.service.name": "kafka",
                "sasl.kerberos.principal.to.local.rules": "RULE:[1:$1]/l",
            },
            "Invalid rule",
        ),
    ],
)
def test_unusable_gssapi_settings_refuse_to_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties({**GSSAPI, **props})


def test_gssapi_without_the_gssapi_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gssapi", None)  # import gssapi raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'wirebroker\[gssapi\]'"):
        BrokerConfig.from_properties({**GSSAPI, "sasl.kerberos.service.name": "kafka"})


def test_jaas_parsing() -> None:
    entry = parse_jaas_config('a.B optional k=v q="x \\" y=;";')
    assert (entry.login_module, entry.control_flag, entry.options) == (
        "a.B",
        "optional",
        {"k": "v", "q": 'x " y=;'},
    )
    with pytest.raises(JaasError, match="2 login modules"):
        parse_jaas_config("a required; b required;")
    with pytest.raises(JaasError, match="not terminated by semi-colon"):
        parse_jaas_config("a required k=v")


def test_plain_server() -> None:
    users = {"alice": "alice-secret"}
    server = PlainServer(users)
    assert server.evaluate(b"\0alice\0alice-secret") == b""
    assert server.complete and server.username == "alice"
    for token, message in [
        (b"\0alice\0nope", "Invalid username or password"),
        (b"\0bob\0alice-secret", "Invalid username or password"),
        (b"alice\0alice", "expected 3 tokens, got 2"),
        (b"\0alice\0alice-secret\0", "expected 3 tokens, got 4"),
        (b"\0\0\0\0\0", "expected 3 tokens, got 4$"),  # as many as Kafka counts
        (b"\0\0x", "username not specified"),
        (b"bob\0alice\0alice-secret", "authorization id that is different"),
    ]:
        with pytest.raises(SaslAuthenticationFailed, match=message):
            PlainServer(users).evaluate(token)


def test_scram_sha_256_rfc_7677_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exchange of RFC 7677 section 3, byte for byte."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    credential = ScramCredential.from_salted_password("SCRAM-SHA-256", salt, salted, 4096)
    monkeypatch.setattr(
        "wirebroker.sasl.scram.secrets.token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_scram_client_rfc_7677_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's side of RFC 7677 section 3: its final message and the server's proof."""
    monkeypatch.setattr(
        "wirebroker.sasl.scram.secrets.token_urlsafe", lambda n: "rOprNGfwEbeRWgbNEkqO"
    )
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    assert client.initial() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.evaluate(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    with pytest.raises(SaslFailure, match="does not know the password"):
        client.evaluate(b"v=AAAA")
    assert not client.complete


def exchange(client: SaslClient, server: SaslServer) -> None:
    """Run a client against a server until the client is done (or one of them raises)."""
    token: bytes | None = client.initial()
    while token is not None:
        token = client.evaluate(server.evaluate(token))


def test_scram_client_and_server_wrong_password_unknown_user_and_escaped_names() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-512", "right")
    users = {"a,b=c": credential}
    server = ScramServer("SCRAM-SHA-512", users.get)
    client = ScramClient("SCRAM-SHA-512", "a,b=c", "right")
    assert client.initial().startswith(b"n,,n=a=2Cb=3Dc,r=")
    exchange(client, server)
    assert client.complete and server.complete and server.username == "a,b=c"
    with pytest.raises(SaslFailure, match="Invalid client credentials"):
        exchange(
            ScramClient("SCRAM-SHA-512", "a,b=c", "wrong"), ScramServer("SCRAM-SHA-512", users.get)
        )
    with pytest.raises(SaslFailure, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-512", users.get).evaluate(b"n,,n=nobody,r=abc")
    with pytest.raises(SaslFailure, match="client-first"):
        ScramServer("SCRAM-SHA-512", users.get).evaluate(b"p=tls-unique,,n=x,r=abc")
    # A proof that is not base64 fails as bad credentials, not as a crash.
    server = ScramServer("SCRAM-SHA-512", users.get)
    first = server.evaluate(b"n,,n=a=2Cb=3Dc,r=abc")
    nonce = first.split(b",")[0][2:]
    with pytest.raises(SaslFailure, match="base64"):
        server.evaluate(b"c=biws,r=" + nonce + b",p=abc")
    # The client refuses a server that asks for too few iterations or does not extend its nonce.
    for server_first, message in [
        (b"r=%s+x,s=c2FsdA==,i=1000", "iterations"),
        (b"r=other,s=c2FsdA==,i=4096", "nonce"),
    ]:
        client = ScramClient("SCRAM-SHA-512", "u", "p")
        ours = client.initial().split(b"r=")[1]
        with pytest.raises(SaslFailure, match=message):
            client.evaluate(server_first.replace(b"%s", ours))


def test_plain_client() -> None:
    client = PlainClient("alice", "alice-secret")
    server = PlainServer({"alice": "alice-secret"})
    exchange(client, server)
    assert client.complete and server.username == "alice"
    with pytest.raises(SaslAuthenticationFailed):
        exchange(PlainClient("alice", "nope"), PlainServer({"alice": "alice-secret"}))


def test_scram_credential_in_kafkas_format() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pw", 8192)
    text = credential.to_kafka_string()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert "stored_key=" in text and "server_key=" in text
    assert ScramCredential.from_kafka_string(text) == credential


NOW_MS = 1_700_000_000_000


def jws(claims: dict[str, object], header: dict[str, object] | None = None) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part(header or {'alg': 'none'})}.{part(claims)}."


def bearer(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_client_and_server() -> None:
    options = {"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginExtension_traceId": "t1"}
    token, extensions = unsecured_token(options, NOW_MS)
    assert extensions == {"traceId": "t1"}
    client = OAuthBearerClient(token, extensions)
    assert client.initial().endswith(b"\x01traceId=t1\x01\x01")
    server = OAuthBearerServer(UnsecuredValidator(), lambda: NOW_MS + 1000)
    exchange(client, server)
    assert client.complete and server.username == "alice"
    assert server.expires_ms == NOW_MS + 3600_000


@pytest.mark.parametrize(
    ("token", "validator", "answer"),
    [
        (jws({"sub": "a", "exp": NOW_MS / 1000 - 1}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "a"}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "a", "exp": "soon"}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "", "exp": 2e9}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "a", "exp": 2e9, "iat": 1.9e9}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "a", "exp": 1.6e9, "iat": 1.7e9}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "a", "exp": 2e9}, {"alg": "HS256"}), UnsecuredValidator(), "invalid_token"),
        (jws({"sub": "a", "exp": 2e9})[:-1] + ".c2ln", UnsecuredValidator(), "invalid_token"),
        (
            jws({"sub": "a", "exp": 2e9}).replace(".", "..", 1),
            UnsecuredValidator(),
            "invalid_token",
        ),
        ("eyJ" + "W" * 40 + ".x.", UnsecuredValidator(), "invalid_token"),
        (
            jws({"sub": "a", "exp": 2e9, "scope": "read"}),
            UnsecuredValidator(required_scope=("read", "write")),
            "insufficient_scope",
        ),
        # the principal claim is configurable: this token names nobody by `user`
        (
            jws({"sub": "a", "exp": 2e9}),
            UnsecuredValidator(principal_claim="user"),
            "invalid_token",
        ),
    ],
)
def test_oauthbearer_refused_tokens_get_kafkas_error_then_fail(
    token: str, validator: UnsecuredValidator, answer: str
) -> None:
    server = OAuthBearerServer(validator, lambda: NOW_MS)
    challenge = json.loads(server.evaluate(bearer(token)))
    assert challenge["status"] == answer and not server.complete
    with pytest.raises(SaslAuthenticationFailed, match=answer):
        server.evaluate(b"\x01")  # the client's acknowledgement: now the exchange fails


@pytest.mark.parametrize("exp", [1e20, 10**30, 1e306])
def test_oauthbearer_a_far_expiry_is_kafkas_longest(exp: float) -> None:
    # Found by tests/wirebroker/test_auth_fuzz.py: 1e306 s raised OverflowError (round of an
    # infinite ms), 1e20 s made a session lifetime beyond a long, which the SaslAuthenticate
    # answer could not carry: both closed the connection after an unexpected error. Kafka's
    # claim in ms is Math.round of a double, which saturates at Long.MAX_VALUE.
    server = OAuthBearerServer(UnsecuredValidator(), lambda: NOW_MS)
    assert server.evaluate(bearer(jws({"sub": "a", "exp": exp}))) == b""
    assert server.complete and server.expires_ms == 2**63 - 1


@pytest.mark.parametrize(
    "message",
    [
        bearer(jws({"sub": "a", "exp": 2e9})).replace(b"\x01\x01", b"\n\x01\x01"),
        bearer(jws({"sub": "a", "exp": 2e9})) + b"\n",
    ],
    ids=["after-the-token", "after-the-message"],
)
def test_oauthbearer_refuses_a_trailing_newline(message: bytes) -> None:
    # Found by the auth fuzz: a `$` matched before a final newline, so these were taken;
    # Kafka's patterns match the whole message and its auth value.
    with pytest.raises(SaslFailure, match="Invalid OAUTHBEARER client first message"):
        OAuthBearerServer(UnsecuredValidator(), lambda: NOW_MS).evaluate(message)


@pytest.mark.parametrize(
    "first",
    [
        b"n,,n=u,r=abc\n",  # a `$` took the final newline
        b"n,a=,n=u,r=abc",  # an empty authorization id
        b"n,,m=,n=u,r=abc",  # an empty reserved value
        b"n,,n=u,r=abc,ext=",  # an extension without a value
    ],
)
def test_scram_refuses_a_client_first_message_outside_its_grammar(first: bytes) -> None:
    # Found by the auth fuzz, all taken as client-first messages: in RFC 5802's grammar, as
    # in Kafka's ClientFirstMessage, each of these values has at least one character and
    # nothing follows the message.
    users = {"u": ScramCredential.from_password("SCRAM-SHA-256", "p")}
    with pytest.raises(SaslFailure, match="client-first"):
        ScramServer("SCRAM-SHA-256", users.get).evaluate(first)
    assert ScramServer("SCRAM-SHA-256", users.get).evaluate(b"n,,n=u,r=abc,ext=1")


def test_oauthbearer_claims_scope_skew_and_bad_messages() -> None:
    validator = UnsecuredValidator.from_options(
        {
            "unsecuredValidatorPrincipalClaimName": "user",
            "unsecuredValidatorRequiredScope": "read write",
            "unsecuredValidatorAllowableClockSkewMs": "5000",
        }
    )
    now_s = NOW_MS / 1000
    scope = {"scope": ["read", "write", "x"]}
    # Within the 5 s skew: expired 2 s ago, or issued 3 s from now.
    for claims in ({"exp": now_s - 2}, {"iat": now_s + 3, "exp": now_s + 60}):
        token = jws({"user": "bob", **claims, **scope})
        server = OAuthBearerServer(validator, lambda: NOW_MS)
        assert server.evaluate(bearer(token)) == b"" and server.username == "bob"
    with pytest.raises(SaslAuthenticationFailed, match="authorization id"):
        OAuthBearerServer(validator, lambda: NOW_MS).evaluate(bearer(token, authzid="eve"))
    for message in [b"", b"n,,\x01auth=Basic abc\x01\x01", b"garbage", b"\x01"]:
        with pytest.raises(SaslFailure):
            OAuthBearerServer(validator, lambda: NOW_MS).evaluate(message)
    deep = base64.urlsafe_b64encode(b'{"x":' + b"[" * 100_000).rstrip(b"=").decode()
    header = jws({}).split(".")[0]
    challenge = OAuthBearerServer(validator, lambda: NOW_MS).evaluate(bearer(f"{header}.{deep}."))
    assert b"invalid_token" in challenge
    with pytest.raises(ValueError, match="ClockSkew"):
        UnsecuredValidator.from_options({"unsecuredValidatorAllowableClockSkewMs": "-1"})
    with pytest.raises(ValueError, match="unsecuredLoginStringClaim_sub"):
        unsecured_token({}, NOW_MS)
    with pytest.raises(ValueError, match="cannot be set"):
        unsecured_token(
            {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_exp": "1"}, 0
        )


OAUTH_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="broker" unsecuredValidatorRequiredScope="kafka";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)
SECURED_HANDLER_KEY = "listener.name.internal.oauthbearer.sasl.server.callback.handler.class"
CLUSTER = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "zookeeper.connect": "z:2181",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.internal.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
}


def test_inter_broker_login_from_the_listeners_jaas_config() -> None:
    login = inter_broker_login(BrokerConfig.from_properties(CLUSTER))
    assert login is not None and (login.listener_name, login.mechanism) == (
        "INTERNAL",
        "SCRAM-SHA-512",
    )
    assert "broker-secret" not in repr(login)
    assert isinstance(login.client(NOW_MS, "localhost"), ScramClient)
    oauth = BrokerConfig.from_properties(
        {**CLUSTER, "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"}
    )
    login = inter_broker_login(oauth)
    assert login is not None and isinstance(login.client(NOW_MS, "localhost"), OAuthBearerClient)
    validator = listener_sasl(oauth, "INTERNAL").oauthbearer
    assert isinstance(validator, UnsecuredValidator) and validator.required_scope == ("kafka",)
    plaintext = {k: v for k, v in CLUSTER.items() if k != "inter.broker.listener.name"}
    assert inter_broker_login(BrokerConfig.from_properties(plaintext)) is None


@requires_gssapi
def test_inter_broker_gssapi_login_from_the_listeners_jaas_config() -> None:
    kerberos = BrokerConfig.from_properties(
        {
            **CLUSTER,
            "sasl.mechanism.inter.broker.protocol": "GSSAPI",
            "sasl.enabled.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "listener.name.internal.gssapi.sasl.jaas.config": KRB5_JAAS,
        }
    )
    login = inter_broker_login(kerberos)
    assert login is not None and login.blocking  # its client reaches the KDC
    assert login.options == {
        "principal": "kafka/broker1@EXAMPLE.COM",
        "keyTab": "/etc/kafka.keytab",
        "serviceName": "kafka",
    }
    assert isinstance(login.client(NOW_MS, "broker2"), GssapiClient)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "GSSAPI must be enabled"),
        ({"sasl.mechanism.inter.broker.protocol": "NOPE"}, "NOPE is not implemented"),
        ({"sasl.mechanism.inter.broker.protocol": "PLAIN"}, "must be enabled on the inter-broker"),
        (
            {"listener.name.internal.scram-sha-512.sasl.jaas.config": None},
            r"^Could not find a 'KafkaServer' or 'internal.KafkaServer' entry in the JAAS "
            r"configuration. System property 'java.security.auth.login.config' is not set: "
            r"listener INTERNAL enables SCRAM-SHA-512: set "
            r"listener.name.internal.scram-sha-512.sasl.jaas.config="
            # this broker's own login: what it needs besides the module
            r"org.apache.kafka.common.security.scram.ScramLoginModule required "
            r'username="broker" password="broker-secret"; or put',
        ),
        (  # as Kafka's: OAuthBearerLoginModule's login asks for a token DefaultLogin cannot give
            {"listener.name.internal.scram-sha-512.sasl.jaas.config": OAUTH_JAAS},
            r"^listener.name.internal.scram-sha-512.sasl.jaas.config: An internal error occurred "
            r"while retrieving token from callback handler .*ScramLoginModule required "
            r'username="broker" password="broker-secret"',
        ),
        (
            {
                "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.replace(
                    ' password="broker-secret"', ""
                )
            },
            "needs this broker's username and password",
        ),
        (
            {
                "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
                "listener.name.internal.oauthbearer.sasl.jaas.config": OAUTH_JAAS.replace(
                    "unsecuredLoginStringClaim_sub", "unsecuredLoginStringClaim_name"
                ),
            },
            "unsecuredLoginStringClaim_sub",
        ),
        (  # the default (unsecured) validator would let anyone in: refused, unlike Kafka
            {"sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks"},
            "would accept unsecured tokens",
        ),
        (
            {f"{SECURED_HANDLER_KEY}": SECURED_VALIDATORS[0]},
            "set sasl.oauthbearer.jwks.endpoint.url",
        ),
        (
            {
                f"{SECURED_HANDLER_KEY}": SECURED_VALIDATORS[1],
                "sasl.oauthbearer.jwks.endpoint.url": "ftp://idp.example/jwks",
            },
            "only http, https and file URLs",
        ),
        (
            {
                f"{SECURED_HANDLER_KEY}": SECURED_VALIDATORS[0],
                "sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks",
                "sasl.oauthbearer.jwks.endpoint.refresh.ms": "0",
            },
            "refresh.ms=0 must be at least 1",
        ),
        (
            {f"{SECURED_HANDLER_KEY}": "com.example.MyHandler"},
            "com.example.MyHandler is not implemented",
        ),
        ({"connection.failed.authentication.delay.ms": "600000"}, "less than connections.max"),
    ],
)
def test_inter_broker_login_refuses_what_cannot_log_in(
    change: dict[str, str | None], message: str
) -> None:
    props = {k: v for k, v in {**CLUSTER, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)  # type: ignore[arg-type]


# secured (OIDC) tokens: the claims, as Kafka's ValidatorAccessTokenValidator checks them -------
SIGNING_KEY = ec.generate_private_key(ec.SECP256R1())
NOW_S = NOW_MS // 1000


def secured(**options: Any) -> SecuredValidator:
    keys = KeySet(JwksEndpoint("https://idp.example/jwks", 3_600_000, 100, 10_000))
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(SIGNING_KEY.public_key()))
    keys.keys = parse_jwks(json.dumps({"keys": [{**jwk, "kid": "k"}]}).encode())
    return SecuredValidator(keys, **options)


def signed(claims: dict[str, Any], kid: str = "k") -> str:
    return jwt.encode(claims, SIGNING_KEY, "ES256", headers={"kid": kid})


@pytest.mark.parametrize(
    ("claims", "options", "refused"),
    [
        ({"exp": NOW_S - 20}, {}, None),  # within the default 30 s of clock skew
        ({"exp": NOW_S - 31}, {}, "expired"),
        ({"exp": NOW_S - 20}, {"clock_skew_s": 0}, "expired"),
        ({"nbf": NOW_S + 60}, {}, "not valid before"),
        ({"nbf": NOW_S + 20}, {}, None),
        ({"iat": None}, {}, "iat"),  # Kafka requires iat
        ({"exp": None}, {}, "exp"),
        ({"sub": None}, {}, "no principal"),
        ({"sub": None, "user": "carol"}, {"principal_claim": "user"}, None),
        ({"aud": "kafka"}, {}, "(?i)audience"),  # an aud no audience was expected for (jose4j's)
        ({"aud": ["x", "kafka"]}, {"expected_audience": ("kafka",)}, None),
        ({"aud": "x"}, {"expected_audience": ("kafka",)}, "(?i)audience"),
        ({}, {"expected_audience": ("kafka",)}, "aud"),
        ({"iss": "https://a"}, {"expected_issuer": "https://a"}, None),
        ({"iss": "https://b"}, {"expected_issuer": "https://a"}, "(?i)issuer"),
        ({"scope": ["a", " "]}, {}, "empty scope"),
    ],
)
def test_secured_token_claims(
    claims: dict[str, Any], options: dict[str, Any], refused: str | None
) -> None:
    base = {"sub": "alice", "iat": NOW_S, "exp": NOW_S + 600}
    token = signed({k: v for k, v in {**base, **claims}.items() if v is not None})
    validator = secured(**options)
    if refused is None:
        assert validator.validate(token, NOW_MS).principal in ("alice", "carol")
    else:
        with pytest.raises(InvalidToken, match=refused):
            validator.validate(token, NOW_MS)


def test_secured_token_scope_expiry_and_signature() -> None:
    token = signed({"sub": " alice ", "iat": NOW_S, "exp": NOW_S + 600, "scope": "read write"})
    checked = secured().validate(token, NOW_MS)
    # Kafka keeps a string scope whole, and trims the subject
    assert (checked.principal, checked.scope) == ("alice", frozenset(["read write"]))
    assert checked.expires_ms == (NOW_S + 600) * 1000
    other = ec.generate_private_key(ec.SECP256R1())
    forged = jwt.encode({"sub": "a", "iat": NOW_S, "exp": NOW_S + 9}, other, "ES256", {"kid": "k"})
    with pytest.raises(InvalidToken, match="signature"):
        secured().validate(forged, NOW_MS)
    with pytest.raises(InvalidToken, match="kid 'other'"):
        secured().validate(signed({"sub": "a"}, kid="other"), NOW_MS)
    with pytest.raises(InvalidToken, match="not allowed"):
        secured().validate(jwt.encode({"sub": "a"}, "", "none"), NOW_MS)
    with pytest.raises(InvalidToken, match="malformed"):
        secured().validate("not.a-token", NOW_MS)


def test_a_jwks_url_is_logged_without_its_user_and_password() -> None:
    endpoint = JwksEndpoint("https://user:secret@idp.example/jwks?x=1", 1, 1, 1)
    assert endpoint.shown == "https://idp.example/jwks?x=1"
    assert JwksEndpoint("file:/etc/jwks.json", 1, 1, 1).shown == "file:/etc/jwks.json"


@pytest.mark.parametrize(
    ("routine", "kerberos_code", "client", "retriable"),
    [
        (13 << 16, 34, False, True),  # KRB_AP_ERR_REPEAT: a replayed authenticator
        (13 << 16, 33, True, True),  # KRB_AP_ERR_TKT_NYV
        (13 << 16, 21, True, True),  # KDC_ERR_CLIENT_NOTYET
        (13 << 16, 7, True, False),  # KDC_ERR_S_PRINCIPAL_UNKNOWN: Kafka's, not retriable
        (13 << 16, 24, False, False),  # KDC_ERR_PREAUTH_FAILED
        (7 << 16, None, True, True),  # NO_CRED, no Kerberos error: Kafka's client retries
        (7 << 16, None, False, False),  # ... its server does not
        (7 << 16, 195, True, False),  # NO_CRED, KRB5_CC_NOTFOUND: a keytab without the key
    ],
)
def test_kafkas_retriable_kerberos_errors(
    routine: int, kerberos_code: int | None, client: bool, retriable: bool
) -> None:
    """Kafka's KerberosError, on python-gssapi's GSSError with MIT's minor status codes."""
    gssapi = pytest.importorskip("gssapi")
    from wirebroker.sasl.kerberos import KRB5_ERRORS, gss_failure
    from wirebroker.sasl.mechanism import SaslRetriable

    minor = 0 if kerberos_code is None else KRB5_ERRORS + kerberos_code
    failure = gss_failure(gssapi, gssapi.raw.misc.GSSError(routine, minor), client=client)
    assert isinstance(failure, SaslFailure)
    assert isinstance(failure, SaslRetriable) is retriable


_ODD_VALUES = st.sampled_from(
    [None, 0, -1, 1e308, 2**64, float("inf"), float("nan"), "", "x", True, [], {}, ["a", 1]]
    + ["kafka", "idp", ["kafka"], "ES256", "k"]  # what the validator expects
)


@settings(max_examples=200, deadline=None)
@given(
    claims=st.dictionaries(
        st.sampled_from(["exp", "iat", "nbf", "sub", "scope", "aud", "iss"]),
        _ODD_VALUES | st.integers(NOW_S - 60, NOW_S + 3600),
    ),
    header=st.dictionaries(st.sampled_from(["alg", "kid", "typ", "crit"]), _ODD_VALUES | st.text()),
    cut=st.integers(0, 400),
    flip=st.integers(0, 400),
)
def test_a_secured_token_is_taken_or_refused_whatever_it_holds(
    claims: dict[str, Any], header: dict[str, Any], cut: int, flip: int
) -> None:
    # Whatever the claims of a token signed by the key set's key, its header replaced by an odd
    # one (the signature then wrong), or its bytes edited: a BearerToken, or InvalidToken saying
    # why (answered as Kafka's invalid_token), never another exception (the connection would
    # close after an unexpected error).
    payload = json.dumps(claims).encode()  # signed as it is: jwt.encode checks claims
    parts = jwt.PyJWS().encode(payload, SIGNING_KEY, "ES256", headers={"kid": "k"}).split(".")
    if header:
        parts[0] = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
    token = bytearray(".".join(parts).encode())
    if flip < len(token):
        token[flip] ^= 0x20
    validator = secured(expected_audience=("kafka",), expected_issuer="idp")
    for candidate in (bytes(token), bytes(token[:cut])):
        with contextlib.suppress(InvalidToken):
            validator.validate(candidate.decode("latin-1"), NOW_MS)
