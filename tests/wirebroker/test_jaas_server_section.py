"""A SASL listener's login modules from the JAAS file's `KafkaServer` section (the system
property `java.security.auth.login.config`, from KAFKA_OPTS), as Kafka's JaasContext finds them
when the listener has no `listener.name.<l>.<mechanism>.sasl.jaas.config`: a client logging in
with a user of the section, what is refused at start and with which message, this broker's own
login to its peers, and the file read once. Kafka's answers to the same file:
`compat/test_jaas_file.py`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.broker_process import BrokerProcess, serving
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.sasl.settings import inter_broker_login, listener_sasl

pytestmark = pytest.mark.timeout(60)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"
SECTION = f"""
KafkaServer {{
    {PLAIN} required
    username="broker" password="broker-pw"
    user_broker="broker-pw" user_alice="alice-pw";
    {SCRAM} required;
}};
"""
SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
}


@pytest.fixture(autouse=True)
def _no_system_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_OPTS", "java.security.auth.login.config"):
        monkeypatch.delenv(name, raising=False)


def jaas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    """`text` as the JAAS file KAFKA_OPTS names (each test its own path: the file is read once
    per process, as the JVM reads it)."""
    path = tmp_path / f"jaas-{uuid.uuid4().hex[:6]}.conf"
    path.write_text(text)
    monkeypatch.setenv("KAFKA_OPTS", f"-Xmx1g -Djava.security.auth.login.config={path}")
    return path


def test_a_client_logs_in_as_a_user_of_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jaas(tmp_path, monkeypatch, SECTION)
    with serving(BrokerProcess(tmp_path / "data", SASL)) as broker:
        client = {
            "bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-pw",
        }
        producer = Producer(client)
        producer.produce("from-the-file", b"v")
        assert producer.flush(15) == 0
        consumer = Consumer({**client, "group.id": "g", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("from-the-file", 0, 0)])
            msg = consumer.poll(15)
            assert msg is not None and msg.error() is None and msg.value() == b"v"
        finally:
            consumer.close()
        wrong = Producer({**client, "sasl.password": "not-alices", "message.timeout.ms": 3000})
        errors: list[KafkaError] = []
        wrong.produce("from-the-file", b"x", on_delivery=lambda err, _msg: errors.append(err))
        wrong.flush(10)
        assert errors and errors[0] is not None
    assert not any("alice-pw" in line for line in broker.log)


def test_the_listener_s_own_section_then_kafka_server_then_its_jaas_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jaas(
        tmp_path,
        monkeypatch,
        f"""sasl_plaintext.KafkaServer {{ {PLAIN} required user_a="1"; }};
        KafkaServer {{ {PLAIN} required user_b="2"; {PLAIN} optional user_b="3" user_c="4"; }};""",
    )
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093,OTHER://127.0.0.1:9094,THIRD://127.0.0.1:9095",
        "listener.security.protocol.map": (
            "SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT,THIRD:SASL_PLAINTEXT"
        ),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.third.plain.sasl.jaas.config": f'{PLAIN} required user_d="5";',
    }
    config = BrokerConfig.from_properties(props)
    users = {
        n: listener_sasl(config, n).plain_users() for n in ("SASL_PLAINTEXT", "OTHER", "THIRD")
    }
    # A user's password is the first module's that names it (JaasContext.configEntryOption).
    assert users == {
        "SASL_PLAINTEXT": {"a": "1"},
        "OTHER": {"b": "2", "c": "4"},
        "THIRD": {"d": "5"},
    }


@pytest.mark.parametrize(
    ("text", "properties", "message"),
    [
        (
            f'KafkaServer {{ {PLAIN} required user_a="1"; {OAUTH} required; }};',
            {"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"},
            r"^section KafkaServer of .*: Must supply exactly 1 non-null JAAS mechanism "
            r"configuration \(size was 2\).*listener.name.sasl_plaintext.oauthbearer.sasl.jaas",
        ),
        (
            f'KafkaServer {{ {PLAIN} required user_a="1"; '
            "com.sun.security.auth.module.JndiLoginModule optional; };",
            {},
            r"^section KafkaServer of .*: com.sun.security.auth.module.JndiLoginModule is not "
            r"allowed. Update System property 'org.apache.kafka.disallowed.login.modules'",
        ),
        (
            f'KafkaServer {{ {PLAIN} required user_a="1" }};',
            {},
            r"^the JAAS file .*jaas-\w+\.conf \(java.security.auth.login.config\): section "
            r"KafkaServer \(line 1\): expected an option's name after option user_a",
        ),
        (
            f'KafkaServer {{ {PLAIN} required user_a="1"; }};',
            {"sasl.enabled.mechanisms": "GSSAPI"},
            # As Kafka's KerberosLogin, whatever the modules (without a Krb5LoginModule, the
            # listener then starts, and fails every GSSAPI login: compat/test_jaas_other_modules.py)
            r"^No serviceName defined in either JAAS or Kafka config$",
        ),
        (
            f"Client {{ {PLAIN} required; }};",
            {"sasl.enabled.mechanisms": "SCRAM-SHA-512"},
            r"^Could not find a 'KafkaServer' or 'sasl_plaintext.KafkaServer' entry in the JAAS "
            r"configuration. System property 'java.security.auth.login.config' is /.*jaas-\w+\.conf: "
            r"listener SASL_PLAINTEXT enables SCRAM-SHA-512: set "
            r"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=",
        ),
        (
            f"Client {{ {PLAIN} required; }};",
            {"sasl.enabled.mechanisms": "GSSAPI"},
            r"^Could not find a 'KafkaServer' or 'sasl_plaintext.KafkaServer' entry in the JAAS "
            r"configuration. System property 'java.security.auth.login.config' is /.*jaas-\w+\.conf",
        ),
    ],
)
def test_what_is_refused_at_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    properties: dict[str, str],
    message: str,
) -> None:
    jaas(tmp_path, monkeypatch, text)
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "sasl.enabled.mechanisms": "PLAIN"}
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties({**props, **properties})


def test_another_mechanism_s_login_module_starts_as_kafka(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka 3.9 (compat/test_jaas_file.py runs both): a section or key whose module is
    another mechanism's starts; PLAIN without a PlainLoginModule has no users, OAUTHBEARER's
    validator takes its one module's options whatever it is."""
    jaas(tmp_path, monkeypatch, f'KafkaServer {{ {SCRAM} required user_a="1"; }};')
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{PLAIN} required;",
    }
    settings = listener_sasl(BrokerConfig.from_properties(props), "SASL_PLAINTEXT")
    assert settings.plain_users() == {}
    assert settings.jaas["OAUTHBEARER"].login_module == SCRAM
    assert settings.oauthbearer is not None
    own = {
        **props,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": f'{SCRAM} required user_b="2";',
    }
    assert listener_sasl(BrokerConfig.from_properties(own), "SASL_PLAINTEXT").plain_users() == {}


def test_a_section_whatever_its_modules_gives_a_mechanism_its_jaas_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's JaasContext, which takes a listener's section (`<l>.KafkaServer`, else
    `KafkaServer`) whatever login modules it holds: SCRAM starts beside PLAIN with a section of
    one PlainLoginModule; a listener with neither a section nor its keys is refused, naming its
    own section."""
    jaas(tmp_path, monkeypatch, f'sasl_plaintext.KafkaServer {{ {PLAIN} required user_a="1"; }};')
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,SCRAM-SHA-256",
    }
    settings = listener_sasl(BrokerConfig.from_properties(props), "SASL_PLAINTEXT")
    assert settings.mechanisms == ("PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256")
    assert settings.plain_users() == {"a": "1"}
    other = {
        **props,
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093,OTHER://127.0.0.1:9094",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT",
        "listener.name.other.plain.sasl.jaas.config": f'{PLAIN} required user_b="2";',
    }
    with pytest.raises(
        ConfigError,
        match=r"^Could not find a 'KafkaServer' or 'other.KafkaServer' entry .* enables "
        "SCRAM-SHA-512: set listener.name.other.scram-sha-512.sasl.jaas.config=",
    ):
        BrokerConfig.from_properties(other)


def test_a_file_that_cannot_be_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={tmp_path}/missing.conf")
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "sasl.enabled.mechanisms": "PLAIN"}
    with pytest.raises(ConfigError, match=r"^cannot read the JAAS file .*missing.conf"):
        BrokerConfig.from_properties(props)
    # A listener with a jaas config of its own for each mechanism does not need the file.
    own = {**props, "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{PLAIN} required;"}
    assert listener_sasl(BrokerConfig.from_properties(own), "SASL_PLAINTEXT").plain_users() == {}


def test_this_broker_s_login_to_its_peers_comes_from_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jaas(tmp_path, monkeypatch, SECTION)
    cluster = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "zookeeper.connect": "z:2181",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    }
    login = inter_broker_login(BrokerConfig.from_properties(cluster))
    assert login is not None and (login.mechanism, login.options["username"]) == ("PLAIN", "broker")
    # As Kafka's SaslClientCallbackHandler, SCRAM takes the username and password the
    # section's PlainLoginModule put in the Subject (its ScramLoginModule has none).
    scram = {**cluster, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}
    login = inter_broker_login(BrokerConfig.from_properties(scram))
    assert login is not None and login.options == {"username": "broker", "password": "broker-pw"}


NO_CREDENTIALS = (
    r"^section KafkaServer of .* needs this broker's username and password: set "
    r"listener.name.internal.{mechanism}.sasl.jaas.config=.* required "
    r'username="broker" password="broker-secret"'
)
NO_SCRAM_CLIENT = (
    r"^section KafkaServer of .*: this broker's SCRAM-SHA-256 login to its peers needs a SCRAM "
    r"client, which Kafka's .*ScramLoginModule registers when a login loads it"
)


@pytest.mark.parametrize(
    ("section", "plain", "scram"),
    [
        # Both modules' credentials are in the Subject: a Java HashSet of them yields `admin`
        # before `broker`, `other-pw` before `broker-pw` (each on its own).
        (
            f'{PLAIN} required username="broker" password="broker-pw" user_broker="broker-pw";'
            f'{SCRAM} required username="admin" password="other-pw";',
            {"username": "admin", "password": "other-pw"},
            {"username": "admin", "password": "other-pw"},
        ),
        # A sufficient module that logs in ends the login: the next one is never loaded, and
        # with it Kafka's SCRAM client.
        (
            f'{PLAIN} sufficient username="broker" password="broker-pw" user_broker="broker-pw";'
            f'{SCRAM} required username="admin" password="other-pw";',
            {"username": "broker", "password": "broker-pw"},
            NO_SCRAM_CLIENT,
        ),
        (
            f'{PLAIN} required user_broker="broker-pw"; {SCRAM} required password="p";'
            f'{OAUTH} optional username="broker" password="broker-pw";',
            NO_CREDENTIALS.format(mechanism="plain"),
            NO_CREDENTIALS.format(mechanism="scram-sha-256"),
        ),
        # ZooKeeper's DigestLoginModule puts them in the Subject as PlainLoginModule, but only
        # with a username.
        (
            f'{DIGEST} required username="broker" password="broker-pw"; {SCRAM} required;',
            {"username": "broker", "password": "broker-pw"},
            {"username": "broker", "password": "broker-pw"},
        ),
        (
            f'{DIGEST} required password="broker-pw"; {SCRAM} required;',
            NO_CREDENTIALS.format(mechanism="plain"),
            NO_CREDENTIALS.format(mechanism="scram-sha-256"),
        ),
    ],
    ids=["hash-order", "sufficient", "none", "digest", "digest-without-username"],
)
def test_this_broker_s_username_and_password_from_the_subject(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    section: str,
    plain: dict[str, str] | str,
    scram: dict[str, str] | str,
) -> None:
    """As Kafka's SaslClientCallbackHandler takes them from the Subject its login with the
    section filled (a dict), or refused (a message)."""
    jaas(tmp_path, monkeypatch, f"KafkaServer {{ {section} }};")
    cluster = {
        "listeners": "INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "zookeeper.connect": "z:2181",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    }
    for mechanism, expected in (("PLAIN", plain), ("SCRAM-SHA-256", scram)):
        props = {**cluster, "sasl.mechanism.inter.broker.protocol": mechanism}
        if isinstance(expected, str):
            with pytest.raises(ConfigError, match=expected):
                BrokerConfig.from_properties(props)
            continue
        login = inter_broker_login(BrokerConfig.from_properties(props))
        assert login is not None and login.options == expected


def test_the_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the JVM's login configuration: a listener checked at run time (an AlterConfigs, a
    listener added) finds the file as the start read it, and the event loop never waits on it."""
    path = jaas(tmp_path, monkeypatch, SECTION)
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "sasl.enabled.mechanisms": "PLAIN"}
    config = BrokerConfig.from_properties(props)
    path.write_text(f'KafkaServer {{ {PLAIN} required user_mallory="m"; }};')
    users = listener_sasl(config, "SASL_PLAINTEXT").plain_users()
    assert users == {"broker": "broker-pw", "alice": "alice-pw"}
    path.unlink()
    assert listener_sasl(config, "SASL_PLAINTEXT").plain_users() == users
