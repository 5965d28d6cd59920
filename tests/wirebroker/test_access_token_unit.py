"""This broker's own OAUTHBEARER login with OIDC client credentials, without a socket: its
settings (Kafka's keys and their listener and mechanism prefixes), LoginAccessTokenValidator's
checks, the refresh time of ExpiringCredentialRefreshingLogin, the Basic authorization, and
Kafka 3.9.1's allowed URLs. Against brokers: tests/cluster/test_oauthbearer_cluster.py."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest

from wirebroker.config import BrokerConfig, ConfigError, key_of
from wirebroker.sasl.access_token import (
    AccessToken,
    RefreshWindow,
    TokenEndpoint,
    validate_access_token,
)
from wirebroker.sasl.oauthbearer import SecuredValidator
from wirebroker.sasl.provider import ALLOWED_URLS, FetchError, allowed_urls
from wirebroker.sasl.settings import SECURED_LOGINS, inter_broker_login, listener_sasl

SECRET = "s3cret-a9c4"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
PREFIX = "listener.name.internal.oauthbearer."
CLUSTER = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "zookeeper.connect": "z:2181",
    "sasl.enabled.mechanisms": "OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
    f"{PREFIX}sasl.server.callback.handler.class": VALIDATOR,
    f"{PREFIX}sasl.login.callback.handler.class": SECURED_LOGINS[0],
    f"{PREFIX}sasl.jaas.config": (
        f'{LOGIN_MODULE} required clientId="broker" clientSecret="{SECRET}" scope="kafka" '
        'extension_traceId="abc";'
    ),
    "sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/keys",
    "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
}


@pytest.fixture(autouse=True)
def _no_allowed_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOWED_URLS, raising=False)
    monkeypatch.delenv("KAFKA_OPTS", raising=False)


def endpoint_of(props: dict[str, str]) -> TokenEndpoint:
    login = inter_broker_login(BrokerConfig.from_properties(props))
    assert login is not None and login.access_token is not None
    return login.access_token.endpoint


def test_the_login_settings_and_their_defaults() -> None:
    endpoint = endpoint_of(CLUSTER)
    assert (endpoint.url, endpoint.client_id, endpoint.scope) == (
        "https://idp.example/token",
        "broker",
        "kafka",
    )
    assert endpoint.extensions == {"traceId": "abc"}
    assert (endpoint.retry_backoff_ms, endpoint.retry_backoff_max_ms) == (100, 10_000)
    assert (endpoint.connect_timeout_ms, endpoint.read_timeout_ms) == (None, None)
    refresh = endpoint.refresh
    assert (refresh.factor, refresh.jitter, refresh.min_period_s, refresh.buffer_s) == (
        0.8,
        0.05,
        60,
        300,
    )
    # the secret is in no repr, and the authorization is RFC 7617's (standard base64)
    login = inter_broker_login(BrokerConfig.from_properties(CLUSTER))
    assert login is not None and login.access_token is not None
    for shown in (repr(login), repr(login.access_token), repr(endpoint)):
        assert SECRET not in shown
    assert (
        endpoint.authorization()
        == "Basic " + base64.b64encode(b"broker:" + SECRET.encode()).decode()
    )
    assert endpoint.request_body() == b"grant_type=client_credentials&scope=kafka"


def test_the_mechanism_prefix_wins_over_the_listener_prefix_and_the_key() -> None:
    props = {
        **CLUSTER,
        "listener.name.internal.sasl.oauthbearer.token.endpoint.url": "https://b.example/t",
        f"{PREFIX}sasl.oauthbearer.token.endpoint.url": "https://c.example/t",
        "sasl.login.retry.backoff.ms": "1",
        "listener.name.internal.sasl.login.retry.backoff.ms": "2",
        f"{PREFIX}sasl.login.refresh.buffer.seconds": "0",
        f"{PREFIX}sasl.oauthbearer.expected.issuer": "https://c.example",
        "listener.name.internal.sasl.oauthbearer.expected.issuer": "https://b.example",
        f"{PREFIX}sasl.oauthbearer.header.urlencode": "true",
    }
    endpoint = endpoint_of(props)
    assert endpoint.url == "https://c.example/t"
    assert endpoint.retry_backoff_ms == 2
    assert endpoint.refresh.buffer_s == 0
    assert endpoint.urlencode_header
    validator = listener_sasl(BrokerConfig.from_properties(props), "INTERNAL").oauthbearer
    assert isinstance(validator, SecuredValidator)
    assert validator.expected_issuer == "https://c.example"
    # a mechanism-prefixed key is Kafka's key for DescribeConfigs and dynamic checks
    key = key_of(f"{PREFIX}sasl.oauthbearer.token.endpoint.url")
    assert key is not None and key.name == "sasl.oauthbearer.token.endpoint.url"


def test_the_url_alone_fetches_and_the_unsecured_handler_ignores_it() -> None:
    without_handler = {k: v for k, v in CLUSTER.items() if "login.callback" not in k}
    assert endpoint_of(without_handler).url == "https://idp.example/token"
    unsecured = {
        **CLUSTER,
        f"{PREFIX}sasl.login.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
            "OAuthBearerUnsecuredLoginCallbackHandler"
        ),
        f"{PREFIX}sasl.jaas.config": f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="b";',
    }
    login = inter_broker_login(BrokerConfig.from_properties(unsecured))
    assert login is not None and login.access_token is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sasl.oauthbearer.token.endpoint.url": None}, "set sasl.oauthbearer.token.endpoint.url"),
        (
            {f"{PREFIX}sasl.jaas.config": f'{LOGIN_MODULE} required clientId="broker";'},
            'clientSecret="..."',
        ),
        ({f"{PREFIX}sasl.login.callback.handler.class": "com.example.H"}, "not implemented"),
        ({"sasl.oauthbearer.token.endpoint.url": "ldap://idp"}, "only http, https and file"),
        ({"sasl.login.refresh.window.factor": "0.3"}, "between 0.5 and 1.0"),
        ({"sasl.login.refresh.buffer.seconds": "3601"}, "between 0 and 3600"),
        ({"sasl.oauthbearer.header.urlencode": "yes"}, "true or false"),
        (
            {f"{PREFIX}sasl.jaas.config": CLUSTER[f"{PREFIX}sasl.jaas.config"] + "x"},
            "sasl.jaas.config",
        ),
    ],
)
def test_a_login_that_cannot_fetch_is_refused(change: dict[str, str | None], message: str) -> None:
    props = {k: v for k, v in {**CLUSTER, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message) as refused:
        BrokerConfig.from_properties(props)  # type: ignore[arg-type]
    assert SECRET not in str(refused.value)


def test_allowed_urls_from_the_environment_or_kafka_opts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert allowed_urls() is None  # unset: every URL, as Kafka 3.9.1
    monkeypatch.setenv("KAFKA_OPTS", f"-Xmx1g -D{ALLOWED_URLS}=https://idp.example/keys")
    assert allowed_urls() == {"https://idp.example/keys"}
    with pytest.raises(ConfigError, match="token.endpoint.url=https://idp.example/token is not"):
        BrokerConfig.from_properties(CLUSTER)
    monkeypatch.setenv(ALLOWED_URLS, " https://idp.example/keys , https://idp.example/token")
    assert endpoint_of(CLUSTER).url == "https://idp.example/token"
    monkeypatch.setenv(ALLOWED_URLS, "")  # set and empty: nothing is allowed
    with pytest.raises(ConfigError, match="jwks.endpoint.url=https://idp.example/keys is not"):
        BrokerConfig.from_properties(CLUSTER)


def jws(payload: Any) -> str:
    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(payload)}.c2ln"


@pytest.mark.parametrize(
    ("claims", "refused"),
    [
        ({}, None),
        ({"scope": "a b"}, None),  # a string is one scope, as Kafka's
        ({"scope": ["a", "b"], "iat": None}, None),  # iat is optional
        ({"exp": None}, "no exp"),
        ({"exp": -1}, "non-negative"),
        ({"exp": "soon"}, "not a number"),
        ({"sub": None}, "no sub claim"),
        ({"sub": "  "}, "no sub claim"),
        ({"sub": 7}, "no sub claim"),
        ({"iat": -5}, "non-negative"),
        ({"scope": ["a", " "]}, "blank scope"),
        ({"scope": ["a", "a"]}, "repeats a"),
    ],
)
def test_login_access_token_validator(claims: dict[str, Any], refused: str | None) -> None:
    base = {"sub": " broker ", "iat": 1_000, "exp": 2_000}
    value = jws({k: v for k, v in {**base, **claims}.items() if v is not None})
    if refused is None:
        token = validate_access_token(value, "sub", "scope")
        assert (token.principal, token.expires_ms) == ("broker", 2_000_000)
        assert value not in repr(token)
    else:
        with pytest.raises(FetchError, match=refused) as e:
            validate_access_token(value, "sub", "scope")
        assert not e.value.retryable and value not in str(e.value)


@pytest.mark.parametrize("value", ["a.b", "a..c", "a.!!!.c", f"x.{jws([1]).split('.')[1]}.y"])
def test_a_fetched_value_that_is_no_jwt_is_refused(value: str) -> None:
    with pytest.raises(FetchError):
        validate_access_token(value, "sub", "scope")


class Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_refresh_time_as_kafkas_expiring_credential_refreshing_login() -> None:
    window = RefreshWindow()  # 0.8 + up to 0.05 jitter, 60 s min period, 300 s buffer
    hour = AccessToken("t", "b", frozenset(), expires_ms=3_600_000, issued_ms=0)
    # 0.8 of the lifetime since iat, plus the jitter
    assert window.refresh_ms(hour, 0, Fixed(0.0)) == 2_880_000
    assert window.refresh_ms(hour, 0, Fixed(1.0)) == 3_060_000
    # no later than the buffer before exp
    assert RefreshWindow(factor=1.0).refresh_ms(hour, 0, Fixed(0.0)) == 3_300_000
    # no sooner than the minimum period from now
    assert window.refresh_ms(hour, 2_900_000, Fixed(0.0)) == 2_960_000
    # less left than the buffer and the period together: the factor of what is left
    short = AccessToken("t", "b", frozenset(), expires_ms=8_000, issued_ms=0)
    assert window.refresh_ms(short, 0, Fixed(0.0)) == 6_400
    assert window.refresh_ms(short, 1_000, Fixed(1.0)) == 1_000 + int(7_000 * 0.85)
    # without iat, the lifetime counts from now
    no_iat = AccessToken("t", "b", frozenset(), expires_ms=3_600_000, issued_ms=None)
    assert window.refresh_ms(no_iat, 600_000, Fixed(0.0)) == 600_000 + 2_400_000
