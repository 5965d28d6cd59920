"""SASL without a socket: the listener settings, JAAS parsing, PLAIN and SCRAM servers."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.sasl.mechanism import SaslAuthenticationFailed, SaslFailure
from wirebroker.sasl.plain import PlainServer
from wirebroker.sasl.scram import ScramCredential, ScramServer
from wirebroker.sasl.settings import JaasError, listener_sasl, parse_jaas_config

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)
SASL = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
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
    config = BrokerConfig.from_properties(props)
    assert listener_sasl(config, "SASL_PLAINTEXT").mechanisms == ("PLAIN",)  # GSSAPI not offered
    # As Kafka's server side, the unprefixed sasl.jaas.config is not read for a listener.
    del props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    with pytest.raises(ConfigError, match="unprefixed sasl.jaas.config is not read"):
        BrokerConfig.from_properties({**props, "sasl.jaas.config": PLAIN_JAAS})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"}, "GSSAPI \\(Kerberos\\) is not"),
        ({**SASL, "listener.name.sasl_plaintext.plain.sasl.jaas.config": "x required;"}, "PLAIN"),
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
            "key=value",
        ),
        ({**SASL, "connections.max.reauth.ms": "-1"}, "must not be negative"),
        (
            {
                **SASL,
                "zookeeper.connect": "z:2181",
                "security.inter.broker.protocol": "SASL_PLAINTEXT",
            },
            "between brokers",
        ),
    ],
)
def test_unusable_sasl_settings_refuse_to_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)


def test_jaas_parsing() -> None:
    entry = parse_jaas_config('a.B optional k=v q="x \\" y=;";')
    assert (entry.login_module, entry.control_flag, entry.options) == (
        "a.B",
        "optional",
        {"k": "v", "q": 'x " y=;'},
    )
    with pytest.raises(JaasError, match="2 login modules"):
        parse_jaas_config("a required; b required;")
    with pytest.raises(JaasError, match="end with"):
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


def _client_final(server_first: bytes, client_first_bare: str, password: str) -> bytes:
    fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha512", password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    stored_key = hashlib.sha512(client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_scram_sha_512_wrong_password_unknown_user_and_escaped_names() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-512", "right")
    users = {"a,b=c": credential}
    server = ScramServer("SCRAM-SHA-512", users.get)
    first = server.evaluate(b"n,,n=a=2Cb=3Dc,r=abc")
    assert server.evaluate(_client_final(first, "n=a=2Cb=3Dc,r=abc", "right")).startswith(b"v=")
    assert server.username == "a,b=c"
    server = ScramServer("SCRAM-SHA-512", users.get)
    first = server.evaluate(b"n,,n=a=2Cb=3Dc,r=abc")
    with pytest.raises(SaslFailure, match="Invalid client credentials"):
        server.evaluate(_client_final(first, "n=a=2Cb=3Dc,r=abc", "wrong"))
    with pytest.raises(SaslFailure, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-512", users.get).evaluate(b"n,,n=nobody,r=abc")
    with pytest.raises(SaslFailure, match="client-first"):
        ScramServer("SCRAM-SHA-512", users.get).evaluate(b"p=tls-unique,,n=x,r=abc")


def test_scram_credential_in_kafkas_format() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pw", 8192)
    text = credential.to_kafka_string()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert "stored_key=" in text and "server_key=" in text
    assert ScramCredential.from_kafka_string(text) == credential
