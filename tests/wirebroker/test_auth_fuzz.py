"""Fuzz a live broker's authentication: what a client sends before it is authenticated, where a
broker meets untrusted clients first.

One broker serves the module on its own thread (`wirebroker.embed.run_broker`, its log records
in this process): a SASL_PLAINTEXT listener (sessions of `REAUTH_MS`, so that a client may
re-authenticate) and a SASL_SSL one, each with PLAIN (the listener's JAAS users),
SCRAM-SHA-256 and -512 (credentials made with AlterUserScramCredentials, of a user whose name
needs SCRAM's escapes, and a delegation token's) and OAUTHBEARER (Kafka's unsecured tokens); an
SSL listener; with MIT Kerberos (`make kerberos`), a KERBEROS listener of GSSAPI (a KDC of the
module's own); the ACL authorizer. Hypothesis drives, with values biased to get past the first
checks (valid exchanges and their parts, then mutated):

- SaslHandshake of every version with odd mechanism names, then SaslAuthenticate v0-v2 or a
  v0 handshake's bare tokens; the requests allowed before authentication, their bytes edited;
- each mechanism's messages: PLAIN's fields (also pipelined with the handshake and a request);
  SCRAM's client-first and client-final (gs2 header, reserved `m=`, escapes, nonce, channel
  binding, extensions, tokenauth, proof; replayed, out of order); OAUTHBEARER's (gs2 header,
  auth scheme, separators, extensions, unsigned tokens and their claims, huge ones, the
  error's \\x01 continuation); a real GSSAPI client's tokens, also as a Kafka 0.9 client's
  first frame;
- any other request before authentication, and re-authentication (KIP-368) with another
  mechanism or principal, and the session lifetimes told;
- on the TLS ports, bytes that are no handshake, a cut one, and garbage or a close_notify after
  one.

Each case runs on a new connection and checks: every answer decodes at its request's version
and matches it, with the outcome an oracle expects where the exchange is clearly good or bad;
or the broker closed the connection deliberately (a warning says why; a TLS record it cannot
decrypt ends that connection quietly, as Kafka's); nothing logged tells a bug
(`fuzz_harness.Records.bugs`); no password, SCRAM proof or key, or token the fuzz sent is in
any log record, DEBUG ones included (every password holds `MARK`, the rest are watched as they
are made), nor a client's name forges a log line; and each listener still serves a good client, having done nothing for a bad one.
Each bug the fuzz found has a deterministic regression test at the end of the module.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import importlib.util
import json
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.api import decode_response
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from protocol.messages.describe_acls import DescribeAclsRequest
from protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from protocol.schema import Message
from tests.protocol.strategies import any_scalar
from tests.wirebroker.fuzz_harness import (
    ANSWER_TIMEOUT,
    HEALTH_VERSIONS,
    Fuzzed,
    Records,
    fuzz_settings,
    recording,
)
from tests.wirebroker.helpers import (
    RawClient,
    host_port,
    request_frame,
    server_jaas,
    wait_until,
)
from tests.wirebroker.kdc import REALM, Kdc, krb5_jaas, missing_binaries, serving_kdc
from tests.wirebroker.pki import KEY_PASSWORD, Pki
from tests.wirebroker.secured import AUTHORIZER
from wirebroker.dispatch import VERSIONS
from wirebroker.embed import run_broker
from wirebroker.sasl.kerberos import GssapiClient
from wirebroker.sasl.scram import saslname

# shrinking a failure takes longer than the examples
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: In every password the fuzz sends: no log record may hold it.
MARK = "s3cr3t"
PASSWORDS = {"admin": f"admin-{MARK}-5e1f", "alice": f"alice-{MARK}-77c1"}
WRONG_PASSWORD = f"wrong-{MARK}-d41d"
#: A user name that would forge a line of the broker's log if the log wrote it as it is.
FORGED = "mallory\nWARNING forged by a client"
#: The SCRAM user: its name needs RFC 5802's escapes (=2C, =3D).
SCRAM_USER = "fuzz,scr=am"
SCRAM_PASSWORD = f"scram-{MARK}-0b9d"
SCRAM_SALT = b"auth-fuzz-salt-0123"
SCRAM_ITERATIONS = 4096
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
SASL_LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL"]
TLS_LISTENERS = ["SSL", "SASL_SSL"]
LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL", "SSL"]
#: The service of the KERBEROS listener (GSSAPI), there when MIT Kerberos is.
KERBEROS_SERVICE = "kafka/localhost"
#: The SASL_PLAINTEXT listener's `connections.max.reauth.ms`: its sessions may be renewed.
REAUTH_MS = 600_000
#: Examples per case: about 25 s for the module on a two-core machine; more for a longer
#: campaign (WIREBROKER_AUTH_FUZZ_EXAMPLES=5000).
EXAMPLES = int(os.environ.get("WIREBROKER_AUTH_FUZZ_EXAMPLES", "150"))


def broker_properties(pki: Pki, log_dir: Path, kdc: Kdc | None) -> dict[str, str]:
    users = " ".join(f'user_{user}="{password}"' for user, password in PASSWORDS.items())
    plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{PASSWORDS["admin"]}" {users};'
    )
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        **(kerberos_properties(kdc) if kdc is not None else {}),
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        **{
            f"listener.name.{name.lower()}.plain.sasl.jaas.config": plain for name in SASL_LISTENERS
        },
        **{k: v for name in SASL_LISTENERS for k, v in server_jaas(name, *MECHANISMS[1:]).items()},
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
        "delegation.token.secret.key": f"token-key-{MARK}-9f3c",
        "connection.failed.authentication.delay.ms": "0",  # hundreds of failures: no waits
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.key.password": KEY_PASSWORD,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
        "log.dirs": str(log_dir),
    }


def kerberos_properties(kdc: Kdc) -> dict[str, str]:
    """The KERBEROS listener: SASL_PLAINTEXT with GSSAPI only, the service kafka/localhost."""
    jaas = krb5_jaas(kdc.keytab(KERBEROS_SERVICE), f"{KERBEROS_SERVICE}@{REALM}")
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS)
        + ",KERBEROS://localhost:0",
        "listener.security.protocol.map": ",".join(
            [*(f"{name}:{name}" for name in LISTENERS), "KERBEROS:SASL_PLAINTEXT"]
        ),
        "listener.name.kerberos.sasl.enabled.mechanisms": "GSSAPI",
        "listener.name.kerberos.gssapi.sasl.jaas.config": jaas,
        "sasl.kerberos.service.name": "kafka",
    }


# SCRAM's arithmetic, the client's side (RFC 5802) ---------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ScramKeys:
    """A password's SCRAM keys for one mechanism, salt and count of iterations."""

    def __init__(self, mechanism: str, password: str, salt: bytes, iterations: int) -> None:
        self.hash = SCRAM_HASHES[mechanism]
        self.salted = hashlib.pbkdf2_hmac(self.hash, password.encode(), salt, iterations)
        self.client_key = self._hmac(self.salted, b"Client Key")
        self.stored_key = hashlib.new(self.hash, self.client_key).digest()
        self.server_key = self._hmac(self.salted, b"Server Key")

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash).digest()

    def proof(self, auth_message: bytes) -> bytes:
        signature = self._hmac(self.stored_key, auth_message)
        return bytes(a ^ b for a, b in zip(self.client_key, signature, strict=True))

    def secrets(self) -> list[str]:
        """What a log must never show of the password (each as the log would: base64, hex)."""
        keys = (self.salted, self.client_key, self.stored_key, self.server_key)
        return [form for key in keys for form in (_b64(key), key.hex())]


scram_keys = functools.lru_cache(ScramKeys)  # the salt of a broker's credential is its own


class ScramLogin(NamedTuple):
    """Who logs in with SCRAM: the module's user, or a delegation token (its id and HMAC)."""

    name: str
    password: str
    tokenauth: bool
    principal: str
    #: When the credential ends (a token's expiry, ms); None if it does not.
    expires_ms: int | None


SCRAM_USER_LOGIN = ScramLogin(SCRAM_USER, SCRAM_PASSWORD, False, SCRAM_USER, None)


# the broker and the conversations with it ------------------------------------------------------


class Closed(Exception):
    """The broker closed the conversation's connection, deliberately (checked)."""


class Secured(Fuzzed):
    """The module's broker: its listeners, how a client reaches each, and its health."""

    def __init__(self, bootstrap: str, records: Records, pki: Pki, kdc: Kdc | None) -> None:
        super().__init__(bootstrap, records, any_scalar, [])
        names = [*LISTENERS, "KERBEROS"][: len(bootstrap.split(","))]
        self.addresses = dict(zip(names, bootstrap.split(","), strict=True))
        self.tls = ssl.create_default_context(cafile=str(pki.ca))
        #: The module's SCRAM user, then a delegation token (made once the broker is up).
        self.scram_logins = [SCRAM_USER_LOGIN]
        #: alice's keys, with a KERBEROS listener (if MIT Kerberos and python-gssapi are here).
        self.alice_keytab = str(kdc.keytab("alice")) if kdc is not None else None

    def gssapi_client(self) -> GssapiClient:
        """alice's login to the KERBEROS listener (its tickets kept from one to the next)."""
        assert self.alice_keytab is not None
        return GssapiClient(f"alice@{REALM}", self.alice_keytab, "kafka", "localhost")

    def connect(self, listener: str) -> RawClient:
        client = RawClient(self.addresses[listener], client_id="auth-fuzz", timeout=ANSWER_TIMEOUT)
        if listener in TLS_LISTENERS:
            client.sock = self.tls.wrap_socket(client.sock, server_hostname="localhost")
        return client

    def check_health(self) -> MetadataResponse:
        """Each listener serves a good client: on a SASL one alice and the super user log in.
        Nothing a refused request asked for was done: the broker holds no topic, no ACL, and
        only the module's SCRAM user and delegation token."""
        for listener in LISTENERS:
            for user in ("alice", "admin") if listener in SASL_LISTENERS else ("",):
                with self.connect(listener) as c:
                    assert c.request(HEALTH_VERSIONS, 3).error_code == ErrorCode.NONE
                    if user:
                        c.login_plain(user, PASSWORDS[user])
                    metadata: MetadataResponse = c.request(MetadataRequest(topics=None), 12)
                    assert metadata.brokers
                    assert not metadata.topics, [t.name for t in metadata.topics]
                    if (listener, user) == ("SASL_PLAINTEXT", "admin"):
                        _nothing_made(c)
        if self.alice_keytab is not None:
            with self.connect("KERBEROS") as c:
                c.login_sasl(self.gssapi_client(), "alice")
                assert c.request(MetadataRequest(topics=[]), 12).brokers
        return metadata

    def checked(self, case: Callable[[Conversation], None], listener: str) -> None:
        """Run `case` on a new connection to `listener`; check the log and the broker's health."""
        since = len(self.records.records)
        with Conversation(self, listener) as conversation, contextlib.suppress(Closed):
            case(conversation)
        assert not self.records.bugs(since), "\n".join(self.records.bugs(since))
        forged = [r for r in self.records.records[since:] if FORGED in r.getMessage()]
        assert not forged, f"a client's name forged a log line: {forged[0].getMessage()!r}"
        self.check_health()
        assert not self.records.bugs(since), "\n".join(self.records.bugs(since))


def _nothing_made(admin: RawClient) -> None:
    """The broker holds no ACL, and only the module's SCRAM user and delegation token."""
    acls = admin.request(DescribeAclsRequest(**ANY_ACL), 3)
    assert (acls.error_code, acls.resources) == (ErrorCode.NONE, [])
    users = admin.request(DescribeUserScramCredentialsRequest(users=None), 0)
    assert [u.user for u in users.results] == [SCRAM_USER]
    tokens = admin.request(DescribeDelegationTokenRequest(owners=None), 3)
    assert len(tokens.tokens) == 1


#: A DescribeAcls filter matching every ACL.
ANY_ACL = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}


class Conversation:
    """One fuzzed connection: each answer decoded at its request's version and matched to it;
    `Closed` once the broker closed the connection, which a warning must say it did."""

    def __init__(self, fuzzed: Secured, listener: str) -> None:
        self.fuzzed = fuzzed
        self.listener = listener
        self.since = len(fuzzed.records.records)
        self.client = fuzzed.connect(listener)
        #: After a v0 SaslHandshake: tokens go bare, size-prefixed.
        self.bare = False

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def ask(self, body: Message, version: int) -> Any:
        correlation_id = self.client.next_correlation_id()
        self._send(self.client.encode(body, version, correlation_id))
        answer = decode_response(self._receive(), body.API_KEY, version)
        assert answer.header.correlation_id == correlation_id
        return answer.body

    def pipelined(self, requests: list[tuple[Message, int]]) -> Iterator[Any]:
        """Send `requests` in one write; their answers, read one at a time."""
        ids = [self.client.next_correlation_id() for _ in requests]
        encoded = (self.client.encode(b, v, i) for (b, v), i in zip(requests, ids, strict=True))
        self._send(b"".join(encoded))
        for (body, version), correlation_id in zip(requests, ids, strict=True):
            answer = decode_response(self._receive(), body.API_KEY, version)
            assert answer.header.correlation_id == correlation_id
            yield answer.body

    def handshake(self, mechanism: str, version: int) -> Any:
        answer = self.ask(SaslHandshakeRequest(mechanism=mechanism), version)
        self.bare = version == 0 and answer.error_code == ErrorCode.NONE
        return answer

    def authenticate(
        self, token: bytes, version: int, good: bool | None = None
    ) -> tuple[bytes, Any]:
        """A SASL token sent as the handshake said (bare after v0, else in SaslAuthenticate at
        `version`): the answer's token and SaslAuthenticate response (None if bare). A refusal
        must close the connection (then `Closed`); `good`: whether the token must be taken
        (True), refused (False), or either (None)."""
        try:
            if self.bare:
                self._send(frame(token))
                answered, answer = self._receive(), None
            else:
                answer = self.ask(SaslAuthenticateRequest(auth_bytes=token), version)
                answered = answer.auth_bytes
        except Closed:
            assert good is not True, f"{token[:80]!r} refused: the connection closed"
            raise
        if answer is not None and answer.error_code == ErrorCode.ILLEGAL_SASL_STATE:
            assert good is None, answer  # authenticated already: served, refused as Kafka's
            return answered, answer
        if answer is not None and answer.error_code != ErrorCode.NONE:
            assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, answer
            assert good is not True, f"{token[:80]!r} refused: {answer.error_message}"
            self.expect_close()
        assert good is not False, f"{token[:80]!r} taken"
        return answered, answer

    def send_as(self, body: Message, version: int, layout: int) -> None:
        """`body` encoded at `layout`, its header saying `version` (one it has no layout of)."""
        request = bytearray(request_frame(body, layout, self.client.next_correlation_id()))
        struct.pack_into(">h", request, 6, version)  # after the size and the API key
        self._send(bytes(request))

    def expect_close(self) -> NoReturn:
        """The broker closes the connection now, answering nothing more."""
        data = self._receive()
        raise AssertionError(f"answered {data[:40]!r} where the connection should close")

    def _send(self, data: bytes) -> None:
        try:
            self.client.send_raw(data)
        except TimeoutError:
            raise
        except OSError:
            self.closed()

    def _receive(self) -> bytes:
        try:
            return self.client.receive_frame()
        except TimeoutError:
            raise AssertionError(f"no answer in {ANSWER_TIMEOUT} s, and no close") from None
        except OSError:  # ConnectionError, or TLS's on a cut connection
            self.closed()

    def closed(self) -> NoReturn:
        records = self.fuzzed.records
        wait_until(  # logged before the close: a short wait keeps shrinking short
            lambda: records.closed_deliberately(self.since),
            timeout=2,
            what="a warning saying why the connection was closed",
        )
        raise Closed


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc | None]:
    """A KDC for the KERBEROS listener; None (its fuzz skipped) without MIT Kerberos."""
    if missing_binaries() or importlib.util.find_spec("gssapi") is None:
        yield None
        return
    with serving_kdc(tmp_path_factory.mktemp("kdc")) as serving:
        yield serving


@pytest.fixture(scope="module")
def secured(
    pki: Pki, kdc: Kdc | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    log_dir = tmp_path_factory.mktemp("auth-fuzzed")
    stored = [scram_keys(m, SCRAM_PASSWORD, SCRAM_SALT, SCRAM_ITERATIONS) for m in SCRAM_HASHES]
    with (
        recording(
            secrets=[MARK, KEY_PASSWORD, *(s for k in stored for s in k.secrets())]
        ) as records,
        run_broker(broker_properties(pki, log_dir, kdc)) as bootstrap,
    ):
        broker = Secured(bootstrap, records, pki, kdc)
        with broker.connect("SASL_PLAINTEXT") as admin:
            admin.login_plain("admin", PASSWORDS["admin"])
            _make_scram_user(admin, stored)
            broker.scram_logins.append(_token(admin, records))
        yield broker
    # The secrets were looked for in every record, DEBUG ones too.
    assert any(r.levelno == logging.DEBUG for r in records.records)


def _make_scram_user(admin: RawClient, stored: list[ScramKeys]) -> None:
    upsertions = [
        AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=SCRAM_USER,
            mechanism=code,
            iterations=SCRAM_ITERATIONS,
            salt=SCRAM_SALT,
            salted_password=keys.salted,
        )
        for code, keys in enumerate(stored, start=1)
    ]
    answer = admin.request(AlterUserScramCredentialsRequest(upsertions=upsertions), 0)
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE]


def _token(admin: RawClient, records: Records) -> ScramLogin:
    """A delegation token of the super user, whose HMAC (its password) is watched."""
    token = admin.request(CreateDelegationTokenRequest(), 3)
    assert token.error_code == ErrorCode.NONE
    records.secrets += [_b64(token.hmac), token.hmac.hex()]
    return ScramLogin(token.token_id, _b64(token.hmac), True, "admin", token.expiry_timestamp_ms)


HANDSHAKE = SaslHandshakeRequest.API_KEY
AUTHENTICATE = SaslAuthenticateRequest.API_KEY
#: A part of a message and whether it is good (True), bad (False) or either (None).
Part = tuple[Any, bool | None]


def versions(api_key: int) -> st.SearchStrategy[int]:
    lo, hi = VERSIONS[api_key]
    return st.integers(lo, hi)


def parts(pool: list[Part]) -> st.SearchStrategy[Part]:
    """A part of `pool`: a good one three times in four, so that whole messages are often good
    but for one part (a bad part mostly ends the exchange)."""
    good = st.sampled_from([p for p in pool if p[1]])
    return st.integers(0, 3).flatmap(lambda i: good if i else st.sampled_from(pool))


def verdict(*parts: Part) -> bool | None:
    """Whether a message of these parts is good: bad if one is, unknown if one may be."""
    flags = [good for _, good in parts]
    return False if False in flags else None if None in flags else True


def fuzz(secured: Secured, case: Callable[[st.DataObject, Conversation], None]) -> None:
    """`EXAMPLES` runs of `case` on a drawn SASL listener, each checked (`Secured.checked`)."""

    @fuzz_settings(EXAMPLES)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        listener = data.draw(st.sampled_from(SASL_LISTENERS), label="listener")
        secured.checked(lambda conversation: case(data, conversation), listener)

    run()


@st.composite
def mutated(draw: st.DrawFn, token: bytes) -> bytes:
    """`token`, or it with a byte-level edit: cut, lengthened, a NUL inserted or removed, a
    byte made invalid UTF-8 or flipped."""
    edit = draw(st.sampled_from(["none"] * 6 + ["cut", "append", "nul", "unnul", "utf8", "flip"]))
    data = bytearray(token)
    # where, as a share of the length: a token's length may change between draws (GSSAPI's)
    at = draw(st.integers(0, 1 << 16)) * len(data) >> 16
    if edit == "flip" and at < len(data):
        data[at] ^= draw(st.integers(1, 255))
    elif edit == "cut":
        del data[at:]
    elif edit == "append":
        data += draw(st.binary(min_size=1, max_size=8))
    elif edit == "nul":
        data.insert(at, 0)
    elif edit == "unnul" and 0 in data:
        del data[data.index(0)]
    elif edit == "utf8":
        data.insert(at, 0xFF)
    return bytes(data)


def served(c: Conversation, answer: Any, version: int, expires_ms: int | None = None) -> None:
    """After a good exchange: the session lifetime it was told, as Kafka's (SaslAuthenticate
    v1+: the listener's `connections.max.reauth.ms`, bounded by a token's expiry, within a
    long), and a request served."""
    if answer is not None and version >= 1:
        told = answer.session_lifetime_ms
        bound = REAUTH_MS if c.listener == "SASL_PLAINTEXT" else 0
        if expires_ms is None:
            assert told == bound
        else:
            left = min(expires_ms, 2**63 - 1) - int(time.time() * 1000)
            bound = min(bound, left) if bound else left
            assert 0 < told and bound - 60_000 <= told <= bound + 1_000, (told, bound)
    assert c.ask(MetadataRequest(topics=[]), 12).brokers


def exchange(
    data: st.DataObject, c: Conversation, mechanism: str, who: Who, good: bool = True
) -> tuple[Any, int, int | None]:
    """A valid exchange of `mechanism` logging in `who` after its handshake (which must be
    `good`); the last SaslAuthenticate answer, its version and the credential's expiry."""
    version = data.draw(versions(AUTHENTICATE), label="authenticate v")
    if isinstance(who, ScramLogin):
        bare = f"n={saslname(who.name)},r=fuzz-nonce{',tokenauth=true' * who.tokenauth}"
        server_first, _ = c.authenticate(f"n,,{bare}".encode(), version, good or None)
        final, _ = scram_final(c, mechanism, bare, server_first.decode(), who.password)
        _, answer = c.authenticate(final, version, good)
        return answer, version, who.expires_ms
    if mechanism == "PLAIN":
        _, answer = c.authenticate(plain_token("", who, PASSWORDS[who]), version, good)
        return answer, version, None
    claimed = claims(sub=who)
    token = watched(c, unsecured_jws({"alg": "none"}, claimed))
    _, answer = c.authenticate(oauth_message("n,,", f"auth=Bearer {token}"), version, good)
    return answer, version, round(claimed["exp"] * 1000)


#: Who logs in: a user of PLAIN or OAUTHBEARER, a login of SCRAM.
Who = str | ScramLogin


def principal(who: Who) -> str:
    return who.principal if isinstance(who, ScramLogin) else who


# PLAIN -----------------------------------------------------------------------------------------


def plain_token(authzid: str, user: str, password: str) -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


_USERS = ["alice", "admin", "nobody", "ALICE", "alice ", "a" * 300, "\u00fcser", "=", ",", FORGED]
_PLAIN_PASSWORDS = [*PASSWORDS.values(), WRONG_PASSWORD, "", f"{MARK}-" * 20_000]


def test_plain(secured: Secured) -> None:
    def case(data: st.DataObject, c: Conversation) -> None:
        user = data.draw(st.sampled_from(_USERS), label="user")
        password = data.draw(st.sampled_from(_PLAIN_PASSWORDS), label="password")
        authzid = data.draw(st.sampled_from(["", user, "admin", "bob"]), label="authzid")
        token = data.draw(mutated(plain_token(authzid, user, password)), label="token")
        fields = token.decode(errors="replace").split("\0")
        good = (
            len(fields) == 3
            and PASSWORDS.get(fields[1]) == fields[2]
            and fields[0] in ("", fields[1])
            and b"\xff" not in token
        )
        version = data.draw(versions(AUTHENTICATE), label="authenticate v")
        if data.draw(st.booleans(), label="pipelined"):  # the login and a request in one write
            requests = [
                (SaslHandshakeRequest(mechanism="PLAIN"), 1),
                (SaslAuthenticateRequest(auth_bytes=token), version),
                (MetadataRequest(topics=[]), 12),
            ]
            answers = c.pipelined(requests)
            assert next(answers).error_code == ErrorCode.NONE
            answer = next(answers)
            assert (answer.error_code == ErrorCode.NONE) == good, answer
            if answer.error_code:
                c.expect_close()
            assert next(answers).brokers
            return
        handshake = c.handshake("PLAIN", data.draw(versions(HANDSHAKE), label="handshake v"))
        assert handshake.error_code == ErrorCode.NONE
        answered, answer = c.authenticate(token, version, good)
        assert answered == b""
        served(c, answer, version)

    fuzz(secured, case)


# SCRAM -----------------------------------------------------------------------------------------

# The parts of a client-first message, each good or bad as Kafka's ScramSaslServer takes it
# (the user name and extensions: for a login, `saslnames` and `extensions`).
_GS2: list[Part] = [
    ("n,,", True),
    ("y,,", False),  # the client would bind a channel if the server could: Kafka cannot
    ("p=tls-unique,,", False),
    ("n,a=x,", False),  # another authorization id
    ("n,a=fuzz=2Cscr=3Dam,", False),  # Kafka compares it unescaped with the user name
    ("n,a=,", False),
    ("n", False),
    ("", False),
]
_RESERVED: list[Part] = [("", True), ("m=ext,", None), ("m=,", False)]
_NONCES: list[Part] = [
    ("fuzz-nonce", True),
    ("x" * 1000, True),
    ("=", True),
    ("", False),
    ("a,b", False),
    ("\x7f", False),
    ("\u00e9", False),
]


def saslnames(login: ScramLogin) -> list[Part]:
    name = saslname(login.name)
    return [
        (name, True),
        *([(login.name, False)] if name != login.name else []),  # unescaped
        (f"{name}=", False),
        *([(name.replace("=2C", "=2c"), False)] if "=2C" in name else []),  # a bad escape
        ("=3", False),
        ("nobody", False),
        ("", False),
    ]


def extensions(login: ScramLogin) -> list[Part]:
    """A token's login needs tokenauth=true (with any case), a user's must not have it."""
    token = login.tokenauth
    return [
        ("", not token),
        (",tokenauth=false", not token),
        (",ext=1", not token),
        (",Ab=c=d", not token),
        (",i=1", not token),  # an attribute of the server's, as an extension
        (",tokenauth=true", token),
        (",tokenauth=TRUE", token),
        (",x=", False),
        (",1=2", False),
        (",", False),
    ]


def scram_final(
    c: Conversation, mechanism: str, first_bare: str, server_first: str, password: str
) -> tuple[bytes, str]:
    """The client-final message proving `password` to `server_first`, and the nonce; the
    proof is watched in the log."""
    fields = dict(f.split("=", 1) for f in server_first.split(",") if "=" in f)
    keys = scram_keys(mechanism, password, base64.b64decode(fields["s"]), int(fields["i"]))
    nonce = fields["r"]
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    proof = watched(c, _b64(keys.proof(auth_message)))
    return f"{without_proof},p={proof}".encode(), nonce


def watched(c: Conversation, secret: str) -> str:
    """`secret`, which no log record may hold from now on."""
    c.fuzzed.records.secrets.append(secret)
    return secret


def test_scram(secured: Secured) -> None:
    def case(data: st.DataObject, c: Conversation) -> None:
        mechanism = data.draw(st.sampled_from(list(SCRAM_HASHES)), label="mechanism")
        login = data.draw(st.sampled_from(secured.scram_logins), label="login")
        handshake = c.handshake(mechanism, data.draw(versions(HANDSHAKE), label="handshake v"))
        assert handshake.error_code == ErrorCode.NONE
        version = data.draw(versions(AUTHENTICATE), label="authenticate v")
        if data.draw(st.sampled_from([False] * 7 + [True]), label="client-final first"):
            c.authenticate(b"c=biws,r=fuzz-nonce,p=" + _b64(bytes(64)).encode(), version, False)
        chosen = [
            data.draw(parts(pool), label=name)
            for name, pool in (
                ("gs2", _GS2),
                ("reserved", _RESERVED),
                ("saslname", saslnames(login)),
                ("nonce", _NONCES),
                ("extensions", extensions(login)),
            )
        ]
        (gs2, _), (reserved, _), (name, _), (nonce, _), (extension, _) = chosen
        bare = f"n={name},r={nonce}{extension}"
        unmutated = f"{gs2}{reserved}{bare}".encode()
        first = data.draw(mutated(unmutated), label="client-first")
        good = verdict(*chosen) if first == unmutated else None
        server_first, _ = c.authenticate(first, version, good)
        if not (first == unmutated and good and reserved == ""):
            return  # the final message's proof would be of a message not known here
        password = data.draw(st.sampled_from([login.password, WRONG_PASSWORD]), label="password")
        final, server_nonce = scram_final(c, mechanism, bare, server_first.decode(), password)
        without_proof, proof = final.decode().rsplit(",p=", 1)
        edit = data.draw(
            st.sampled_from(
                ["none", "channel", "nonce", "attribute", "proof", "base64", "bytes", "replay"]
            ),
            label="client-final edit",
        )
        if edit == "channel":  # the gs2 header's base64 ("n,,": biws) made another
            odd = data.draw(st.sampled_from(["", "eSws", "!!"]))
            final = final.replace(b"c=biws", f"c={odd}".encode())
        elif edit == "nonce":
            odd = data.draw(st.sampled_from([nonce, server_nonce + "x", "", server_nonce * 2]))
            final = final.replace(f"r={server_nonce}".encode(), f"r={odd}".encode())
        elif edit == "attribute":
            odd = data.draw(st.sampled_from(["ext=1", "m=x", "i=1", "s=c2FsdA==", "x"]))
            final = f"{without_proof},{odd},p={proof}".encode()
        elif edit == "proof":
            raw = base64.b64decode(proof)
            odd = data.draw(st.sampled_from([raw[:-1], raw + b"\0", b"", bytes(len(raw))]))
            final = f"{without_proof},p={_b64(odd)}".encode()
        elif edit == "base64":
            final = f"{without_proof},p={proof[:-2]}".encode()
        elif edit == "bytes":
            final = data.draw(mutated(final), label="client-final")
        elif edit == "replay":
            final = first
        # Kafka leaves attributes out of what the proof signs (RFC 5802 puts them in): either.
        taken = None if edit in ("attribute", "bytes") else edit == "none"
        server_final, answer = c.authenticate(final, version, taken and password == login.password)
        assert server_final.startswith(b"v=")
        served(c, answer if taken else None, version, login.expires_ms)

    fuzz(secured, case)


# OAUTHBEARER -----------------------------------------------------------------------------------


def _part(obj: Any) -> str:
    """A JWS part: `obj` as JSON (a str as it is: a part that is no JSON object), base64url."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def unsecured_jws(header: Any, claimed: Any, signature: str = "") -> str:
    return f"{_part(header)}.{_part(claimed)}.{signature}"


def claims(sub: Any = "alice", **more: Any) -> dict[str, Any]:
    """An unsecured token's claims, good for an hour from `T0`; `jti` holds `MARK`: the claims
    are never logged whole."""
    return {"sub": sub, "iat": T0 - 1, "exp": T0 + 3600, "jti": f"jti-{MARK}", **more}


def oauth_message(gs2: str, *pairs: str, end: str = "\x01") -> bytes:
    """A client's first OAUTHBEARER message: `gs2`, then each key=value pair, each ended
    with \\x01, then `end`."""
    return f"{gs2}\x01{''.join(p + chr(1) for p in pairs)}{end}".encode()


#: The fuzz's now (s), fixed: a token's claims, as every draw, must be the same when hypothesis
#: draws it again; a second ago, as the broker's clock may be a little behind.
T0 = int(time.time()) - 1
_NOW = object()  # relative to now: the value is seconds from now
_SUBS: list[Part] = [
    ("alice", True),
    ("nobody", True),  # the unsecured validator takes any principal
    ("x" * 300, True),
    (FORGED, True),
    ("", False),
    (" ", False),
    (1, False),
    (None, False),
    (["alice"], False),
]
_EXPS: list[Part] = [
    ((_NOW, 3600), True),
    ((_NOW, -60), False),
    (0, False),
    (-1, False),
    (1e20, True),
    (1e306, True),
    (2**63, True),
    (10**30, True),
    ("3600", False),
    (None, False),
    (True, False),
    (float("inf"), False),
    (float("nan"), False),
]
_IATS: list[Part] = [
    ((_NOW, 0), True),
    ((_NOW, -60), True),
    (None, True),
    (-1, True),
    ((_NOW, 3600), False),  # after now
    (1e308, False),
    ("x", False),
]
_SCOPES: list[Part] = [
    (None, True),
    ("a", True),
    (["a", "b"], True),
    ([1, None], None),
    (1, False),
    ({"x": 1}, False),
]
_HEADERS: list[Part] = [
    ({"alg": "none"}, True),
    ({"alg": "none", "typ": "JWT"}, True),
    ({"alg": "HS256"}, False),
    ({}, False),
    ({"alg": None}, False),
    ("[]", False),
    ("no json", False),
]
_SIGNATURES: list[Part] = [("", True), ("c2ln", False)]
_SHAPES: list[Part] = [("jws", True), ("two parts", False), ("four parts", False), ("..", False)]
_GS2_OAUTH: list[Part] = [("n,,", True), ("n,a=bob,", True), ("y,,", False), ("n,a=,", False)]
_SCHEMES: list[Part] = [
    ("Bearer {}", True),
    ("bearer {}", True),
    ("BEARER   {}", True),
    ("Basic {}", False),
    ("Bearer", False),
    ("Bearer {}\n", False),
    ("Bearer {} x", False),
    ("Bearer  ", False),
]
_OAUTH_EXTENSIONS: list[Part] = [
    ("", True),
    ("k=v", True),
    (f"k={'v' * 1000}", True),
    ("tokenauth=true", True),
    ("=v", False),
    ("k=", False),
    ("k=\x00", False),
    ("k=\x7f", False),
    ("k\u00e9=v", False),
    ("auth=Bearer x", None),  # a second auth: the last one counts
]
_ENDS: list[Part] = [("\x01", True), ("", False), ("\x02", False), ("\x01\x01", False)]


def _seconds(value: Any) -> Any:
    return T0 + value[1] if isinstance(value, tuple) else value


@st.composite
def oauth_first(draw: st.DrawFn) -> tuple[bytes, str | None, str, int | None]:
    """A client's first OAUTHBEARER message; what must become of it (taken, refused, its
    token refused; None: either), its token, and the token's expiry (ms; None if unknown)."""
    pick = {
        name: draw(parts(pool), label=name)
        for name, pool in (
            ("sub", _SUBS),
            ("exp", _EXPS),
            ("iat", _IATS),
            ("scope", _SCOPES),
            ("header", _HEADERS),
            ("signature", _SIGNATURES),
            ("shape", _SHAPES),
            ("gs2", _GS2_OAUTH),
            ("scheme", _SCHEMES),
            ("extension", _OAUTH_EXTENSIONS),
            ("end", _ENDS),
        )
    }
    claimed = claims(pick["sub"][0], exp=_seconds(pick["exp"][0]))
    for name in ("iat", "scope"):
        value = _seconds(pick[name][0])
        if value is None:
            claimed.pop(name, None)
        else:
            claimed[name] = value
    if draw(st.booleans(), label="huge"):
        claimed["pad"] = "p" * 300_000
    token = unsecured_jws(pick["header"][0], claimed, pick["signature"][0])
    shape = pick["shape"][0]
    if shape == "two parts":
        token = token.rsplit(".", 1)[0]
    elif shape == "four parts":
        token += ".x"
    elif shape == "..":
        token = token.replace(".", "..", 1)
    good_token = verdict(*(pick[n] for n in ("sub", "exp", "iat", "scope", "header")))
    good_token = verdict((0, good_token), pick["signature"], pick["shape"])
    exp, iat = claimed["exp"], claimed.get("iat")
    if good_token and isinstance(iat, float) and exp <= iat:
        good_token = False
    pairs = [pick["scheme"][0].format(token)]
    pairs = [f"auth={pairs[0]}", *filter(None, [pick["extension"][0]])]
    gs2 = pick["gs2"][0]
    good_framing = verdict(pick["gs2"], pick["scheme"], pick["extension"], pick["end"])
    if pick["extension"][1] is None:  # a second auth=, which replaces the first
        good_framing = None
    # Kafka's: the claim's milliseconds as a long, saturated
    expires = None
    if good_token:
        expires = 2**63 - 1 if exp * 1000 >= 2**63 - 1 else round(exp * 1000)
    message = oauth_message(gs2, *pairs, end=pick["end"][0])
    sent = draw(mutated(message), label="message")
    if sent != message or good_framing is None:
        outcome = None
    elif not good_framing:
        outcome = "refused"
    elif good_token is None:
        outcome = None
    elif not good_token:
        outcome = "invalid token"  # answered with the token's error, refused after it
    else:  # checked once the token is: another principal is refused
        outcome = "refused" if gs2 == "n,a=bob," else "taken"
    return sent, outcome, token, expires


def test_oauthbearer(secured: Secured) -> None:
    def case(data: st.DataObject, c: Conversation) -> None:
        handshake = c.handshake("OAUTHBEARER", data.draw(versions(HANDSHAKE), label="v"))
        assert handshake.error_code == ErrorCode.NONE
        version = data.draw(versions(AUTHENTICATE), label="authenticate v")
        message, outcome, token, expires = data.draw(oauth_first())
        watched(c, token)
        answered = {"taken": True, "invalid token": True, "refused": False}.get(outcome)
        error, answer = c.authenticate(message, version, answered)
        if not error:
            assert outcome in ("taken", None), f"{token[:80]} taken"
            served(c, answer if outcome else None, version, expires)
            return
        assert outcome in ("invalid token", None), error
        assert json.loads(error)["status"] == "invalid_token", error
        # Kafka's continuation: the client acknowledges the error with \x01, then it fails.
        then = data.draw(st.sampled_from([b"\x01", b"\x01\x01", b"", b"x"]), label="then")
        c.authenticate(then, version, False)
        raise AssertionError("no close after the error's continuation")

    fuzz(secured, case)


# The handshake, and tokens of any mechanism ---------------------------------------------------

_MECHANISM_NAMES = [
    *MECHANISMS,
    "GSSAPI",  # Kafka's, not enabled here
    "plain",
    "",
    "SCRAM-SHA-1",
    "PLAIN\0",
    "OAUTHBEARER ",
    "\u00e9",
    "X" * 32_767,  # the longest string
]
_TOKENS = st.binary(max_size=64) | st.sampled_from(
    [
        b"",
        b"\0",
        b"\x01",
        b"n,,",
        plain_token("", "alice", PASSWORDS["alice"]),
        f"n,,n={saslname(SCRAM_USER)},r=fuzz-nonce".encode(),
        b"c=biws,r=fuzz-nonce,p=AAAA",
        oauth_message("n,,", "auth=Bearer e30.e30."),
    ]
)


def test_handshake_of_every_version_then_any_tokens(secured: Secured) -> None:
    def case(data: st.DataObject, c: Conversation) -> None:
        if data.draw(st.booleans(), label="ApiVersions first"):
            answer = c.ask(HEALTH_VERSIONS, data.draw(st.integers(3, 4), label="ApiVersions v"))
            assert answer.error_code == ErrorCode.NONE
        version = data.draw(st.sampled_from([0, 1, 2, 3, -1, 2**15 - 1]), label="handshake v")
        mechanism = data.draw(st.sampled_from(_MECHANISM_NAMES), label="mechanism")
        if version not in (0, 1):  # no layout of its own: Kafka closes, answering nothing
            c.send_as(SaslHandshakeRequest(mechanism=mechanism), version, 1)
            c.expect_close()
        answer = c.handshake(mechanism, version)
        assert sorted(answer.mechanisms) == sorted(MECHANISMS)
        if mechanism not in MECHANISMS:
            assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
            c.expect_close()
        assert answer.error_code == ErrorCode.NONE
        for _ in range(data.draw(st.integers(1, 3), label="tokens")):
            token = data.draw(_TOKENS, label="token")
            version = data.draw(st.integers(0, 3), label="authenticate v")
            if version == 3 and not c.bare:
                c.send_as(SaslAuthenticateRequest(auth_bytes=token), version, 2)
                c.expect_close()
            c.authenticate(token, version)

    fuzz(secured, case)


def test_mangled_frames_before_authentication(secured: Secured) -> None:
    """What a client may send before it is authenticated (ApiVersions, SaslHandshake, then
    SaslAuthenticate), its bytes edited: header and body. Answered, or closed deliberately."""

    def case(data: st.DataObject, c: Conversation) -> None:
        requests: list[tuple[Message, int]] = [(HEALTH_VERSIONS, 3), (HEALTH_VERSIONS, 0)]
        if data.draw(st.booleans(), label="after a handshake"):
            assert c.handshake("PLAIN", 1).error_code == ErrorCode.NONE
            token = plain_token("", "alice", PASSWORDS["alice"])
            requests = [(SaslAuthenticateRequest(auth_bytes=token), v) for v in (0, 1, 2)]
        else:
            requests += [(SaslHandshakeRequest(mechanism="PLAIN"), v) for v in (0, 1)]
        body, version = data.draw(st.sampled_from(requests), label="request")
        payload = request_frame(body, version, c.client.next_correlation_id())[4:]
        c._send(frame(data.draw(mutated(payload), label="bytes")))
        c._receive()  # an answer (whatever it is now), else Closed

    fuzz(secured, case)


# Requests before authentication --------------------------------------------------------------

_OTHER_KEYS = sorted(set(VERSIONS) - {ApiVersionsRequest.API_KEY, HANDSHAKE, AUTHENTICATE})


def test_no_other_request_before_authentication(secured: Secured) -> None:
    """Kafka's SaslServerAuthenticator: before a handshake, any request but ApiVersions and
    SaslHandshake closes the connection unanswered; after it, it is answered with its error
    response (ILLEGAL_SASL_STATE), then closed (after a v0 handshake, it is a bad token).
    Nothing it asked for is done (the health check: no topic)."""

    def case(data: st.DataObject, c: Conversation) -> None:
        stage = data.draw(st.sampled_from(["first", "after ApiVersions", "authenticating"]))
        if stage == "after ApiVersions":
            assert c.ask(HEALTH_VERSIONS, 3).error_code == ErrorCode.NONE
        elif stage == "authenticating":
            mechanism = data.draw(st.sampled_from(MECHANISMS), label="mechanism")
            handshake = c.handshake(mechanism, data.draw(versions(HANDSHAKE), label="v"))
            assert handshake.error_code == ErrorCode.NONE
        api_key = data.draw(st.sampled_from(_OTHER_KEYS), label="api key")
        version = data.draw(versions(api_key), label="version")
        body = data.draw(c.fuzzed.requests(api_key, version), label="request")
        correlation_id = c.client.next_correlation_id()
        c._send(c.client.encode(body, version, correlation_id))
        if stage == "authenticating" and not c.bare:
            answer = decode_response(c._receive(), api_key, version)
            assert answer.header.correlation_id == correlation_id
        c.expect_close()

    fuzz(secured, case)


# Re-authentication (KIP-368) ------------------------------------------------------------------


def test_reauthentication(secured: Secured) -> None:
    """A session with a lifetime (SASL_PLAINTEXT's, or an OAUTHBEARER token's, or a delegation
    token's) may be renewed with a SaslHandshake: of the same mechanism, for the same principal
    (a token's is its owner), else the connection closes; without one a SaslHandshake is
    answered ILLEGAL_SASL_STATE, and the connection served after it."""

    def whom(mechanism: str) -> st.SearchStrategy[Who]:
        if mechanism in SCRAM_HASHES:
            return st.sampled_from(secured.scram_logins)
        return st.sampled_from(list(PASSWORDS))

    def case(data: st.DataObject, c: Conversation) -> None:
        mechanism = data.draw(st.sampled_from(MECHANISMS), label="mechanism")
        who = data.draw(whom(mechanism), label="who")
        handshake = c.handshake(mechanism, data.draw(versions(HANDSHAKE), label="handshake v"))
        assert handshake.error_code == ErrorCode.NONE
        answer, version, expires = exchange(data, c, mechanism, who)
        served(c, answer, version, expires)
        session = c.listener == "SASL_PLAINTEXT" or expires is not None
        again = data.draw(st.sampled_from(MECHANISMS), label="mechanism again")
        handshake = c.handshake(again, data.draw(versions(HANDSHAKE), label="handshake v again"))
        if not session:
            assert handshake.error_code == ErrorCode.ILLEGAL_SASL_STATE
            c.bare = False
            served(c, None, 0)
            return
        other = data.draw(whom(again), label="who again")
        if again != mechanism:  # Kafka: answered, then the next token closes
            if handshake.error_code == ErrorCode.NONE:
                exchange(data, c, again, other, good=False)
            c.expect_close()
        assert handshake.error_code == ErrorCode.NONE
        same = principal(other) == principal(who)
        answer, version, expires = exchange(data, c, again, other, good=same)
        served(c, answer, version, expires)

    fuzz(secured, case)


# GSSAPI ----------------------------------------------------------------------------------------


def test_gssapi(secured: Secured) -> None:
    """A real client's GSSAPI tokens (RFC 4752: the context's, then the security layer's),
    edited, or bytes; after a handshake, or as a Kafka 0.9 client sends its first token (no
    handshake, no Kafka header)."""
    if secured.alice_keytab is None:
        pytest.skip("MIT Kerberos (`make kerberos`) is not installed: no KERBEROS listener")

    @fuzz_settings(EXAMPLES)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        secured.checked(lambda c: case(data, c), "KERBEROS")

    def case(data: st.DataObject, c: Conversation) -> None:
        client = secured.gssapi_client()
        way = data.draw(st.sampled_from(["handshake v1", "handshake v0", "no handshake"]))
        if way == "no handshake":
            c.bare = True
        else:
            handshake = c.handshake("GSSAPI", 0 if way == "handshake v0" else 1)
            assert handshake.error_code == ErrorCode.NONE
        version = data.draw(versions(AUTHENTICATE), label="authenticate v")
        token: bytes | None = client.initial()
        good: bool | None = True
        while token is not None:
            sent = data.draw(mutated(token) | st.binary(max_size=64), label="token")
            if sent != token:
                good = None
            answer, response = c.authenticate(sent, version, good)
            if good is None:
                return  # the exchange is off its tracks: whatever it did, it was checked
            token = client.evaluate(answer)
        served(c, response, version)

    run()


# TLS: what comes instead of a handshake, and after one ---------------------------------------

_TLS_CASES = ["bytes", "kafka request", "cut handshake", "garbage records", "close_notify"]


def client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a TLS client: its ClientHello."""
    hello = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), False, "localhost")
    with pytest.raises(ssl.SSLWantReadError):
        hello.do_handshake()
    return outgoing.read()


def wait_eof(sock: socket.socket) -> None:
    """Read what the broker sends (a TLS alert, perhaps) until it closes the connection."""
    with socket.socket(fileno=os.dup(sock.fileno())) as raw:
        raw.settimeout(ANSWER_TIMEOUT)
        try:
            while raw.recv(65536):
                pass
        except ConnectionError:
            pass


def test_tls_listeners_take_no_garbage(secured: Secured) -> None:
    """Garbage where a TLS handshake belongs (random bytes, a Kafka request, a cut handshake)
    ends that connection with a warning; garbage records or a close_notify in a request after
    a handshake end it (quietly for garbage, as Kafka's IOException: nothing to tell)."""

    @fuzz_settings(EXAMPLES)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        listener = data.draw(st.sampled_from(TLS_LISTENERS), label="listener")
        kind = data.draw(st.sampled_from(_TLS_CASES), label="case")
        records = secured.records
        since = len(records.records)
        sock = socket.create_connection(host_port(secured.addresses[listener]), ANSWER_TIMEOUT)
        try:
            if kind == "bytes":
                sock.sendall(data.draw(st.binary(min_size=1, max_size=2048), label="bytes"))
            elif kind == "kafka request":
                body = data.draw(
                    st.sampled_from([HEALTH_VERSIONS, SaslHandshakeRequest(mechanism="PLAIN")])
                )
                sock.sendall(request_frame(body, 1, 1))
            elif kind == "cut handshake":
                hello = client_hello(secured.tls)
                sock.sendall(hello[: data.draw(st.integers(0, len(hello) - 1), label="cut")])
            else:
                sock = secured.tls.wrap_socket(sock, server_hostname="localhost")
                half = request_frame(HEALTH_VERSIONS, 3, 1)
                sock.sendall(half)  # answered: the broker's side of the handshake is done
                sock.recv(65536)
                half = half[: data.draw(st.integers(1, len(half) - 1), label="cut")]
                if kind == "garbage records":
                    sock.sendall(half)
                    record = data.draw(st.sampled_from([b"", b"\x17\x03\x03\x00\x20"]))
                    garbage = record + data.draw(st.binary(min_size=1, max_size=64))
                    os.write(sock.fileno(), garbage)
                else:
                    sock.sendall(half)
                    with contextlib.suppress(OSError):  # the broker closed first
                        sock = sock.unwrap()  # close_notify
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            wait_eof(sock)
        finally:
            sock.close()
        if kind in ("bytes", "kafka request", "cut handshake"):
            wait_until(
                lambda: records.closed_deliberately(since),
                timeout=2,
                what="a warning saying why the connection was closed",
            )
        assert not records.bugs(since), "\n".join(records.bugs(since))
        secured.check_health()
        assert not records.bugs(since), "\n".join(records.bugs(since))

    run()


# Regressions: what the fuzz found, each answered as Kafka 3.9 answers it ---------------------


def _authenticate(c: RawClient, mechanism: str, token: bytes) -> Any:
    assert c.request(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == ErrorCode.NONE
    return c.request(SaslAuthenticateRequest(auth_bytes=token), 2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("listener", SASL_LISTENERS)
@pytest.mark.parametrize("exp", [1e20, 1e306])
def test_a_token_expiring_past_a_long_logs_in(secured: Secured, listener: str, exp: float) -> None:
    # 1e306 s raised OverflowError, 1e20 s made a session lifetime the answer could not carry:
    # the connection closed after an unexpected error. Kafka saturates the expiry at a long's
    # milliseconds: the session lasts until then (or connections.max.reauth.ms).
    token = unsecured_jws({"alg": "none"}, claims(exp=exp))
    with secured.connect(listener) as c:
        answer = _authenticate(c, "OAUTHBEARER", oauth_message("n,,", f"auth=Bearer {token}"))
        assert answer.error_code == ErrorCode.NONE, answer
        told = answer.session_lifetime_ms
        if listener == "SASL_PLAINTEXT":
            assert told == REAUTH_MS
        else:
            assert abs(2**63 - 1 - int(time.time() * 1000) - told) < 60_000
        assert c.request(MetadataRequest(topics=[]), 12).brokers


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("mechanism", "token"),
    [
        (
            "OAUTHBEARER",
            oauth_message("n,,", f"auth=Bearer {unsecured_jws({'alg': 'none'}, claims())}\n"),
        ),
        ("SCRAM-SHA-256", f"n,,n={saslname(SCRAM_USER)},r=fuzz-nonce\n".encode()),
        ("SCRAM-SHA-256", f"n,a=,n={saslname(SCRAM_USER)},r=fuzz-nonce".encode()),
        ("SCRAM-SHA-512", f"n,,n={saslname(SCRAM_USER)},r=fuzz-nonce,x=".encode()),
    ],
    ids=["oauthbearer-newline", "scram-newline", "scram-empty-authzid", "scram-empty-extension"],
)
def test_a_message_outside_its_grammar_is_refused(
    secured: Secured, mechanism: str, token: bytes
) -> None:
    # Each was taken: a `$` matched before a final newline, and SCRAM's patterns let values
    # be empty. Kafka's patterns match whole messages, and values of a character at least.
    with secured.connect("SASL_PLAINTEXT") as c:
        answer = _authenticate(c, mechanism, token)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}"
        )
        assert c.wait_closed()


@pytest.mark.timeout(30)
def test_a_user_name_cannot_forge_a_log_line(secured: Secured) -> None:
    # The failure's log line, and the debug line of a success, wrote the name a client gave as
    # it came: a newline in it began a line of the client's own in the broker's log. Its
    # control characters are escaped now (Kafka's failure line names no user).
    since = len(secured.records.records)
    with secured.connect("SASL_PLAINTEXT") as c:
        answer = _authenticate(c, "PLAIN", plain_token("", FORGED, WRONG_PASSWORD))
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert c.wait_closed()
    wait_until(lambda: secured.records.closed_deliberately(since), what="the close logged")
    told = [r.getMessage() for r in secured.records.records[since:]]
    assert any("User:mallory\\x0aWARNING forged by a client failed" in m for m in told), told
    assert not [m for m in told if FORGED in m]


@pytest.mark.timeout(30)
def test_a_second_reauthentication_within_a_second_is_refused(secured: Secured) -> None:
    # Read beside the fuzz's re-authentications: every SaslHandshake of a session began one.
    # Kafka's KafkaChannel begins at most one a second; a SaslHandshake sooner is a request,
    # which KafkaApis answers ILLEGAL_SASL_STATE, and the connection is served on.
    token = plain_token("", "alice", PASSWORDS["alice"])
    with secured.connect("SASL_PLAINTEXT") as c:
        assert _authenticate(c, "PLAIN", token).session_lifetime_ms == REAUTH_MS
        assert _authenticate(c, "PLAIN", token).session_lifetime_ms == REAUTH_MS  # renewed
        again = c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert c.request(MetadataRequest(topics=[]), 12).brokers
