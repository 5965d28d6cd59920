"""The ZooKeeper login's sources and checks, without a ZooKeeper: the JAAS file's sections,
the system properties Kafka reads (from KAFKA_OPTS), what is refused and with which message,
and Kafka's znode ACLs by path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.sasl.jaas_file import parse_jaas_file
from wirebroker.sasl.kerberos import service_host
from wirebroker.sasl.settings import JaasError
from wirebroker.zk.acls import znode_acls
from wirebroker.zk.sasl_login import ZkKerberosLogin, secure_acls, zk_login
from wirebroker.zk.server_principal import gss_target

pytestmark = pytest.mark.timeout(30)

DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"


@pytest.fixture(autouse=True)
def _no_system_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "KAFKA_OPTS",
        "java.security.auth.login.config",
        "zookeeper.sasl.client",
        "zookeeper.sasl.clientconfig",
        "zookeeper.sasl.client.username",
        "zookeeper.sasl.client.canonicalize.hostname",
        "zookeeper.server.principal",
        "zookeeper.server.realm",
    ):
        monkeypatch.delenv(name, raising=False)


def jaas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, *flags: str) -> Path:
    path = tmp_path / "jaas.conf"
    path.write_text(text)
    opts = " ".join(["-Xmx1g", f"-Djava.security.auth.login.config={path}", *flags])
    monkeypatch.setenv("KAFKA_OPTS", opts)
    return path


def test_a_jaas_file_s_sections_with_comments_and_quoted_braces() -> None:
    sections = parse_jaas_file(
        """
        /* Kafka's file: the listeners' section and the ZooKeeper client's */
        KafkaServer {
            org.apache.kafka.common.security.plain.PlainLoginModule required
            user_admin="a}b;c" // a comment
            ;
        };
        Client { org.apache.zookeeper.server.auth.DigestLoginModule required
            username="kafka" password="s3cret"; };
        """
    )
    assert sorted(sections) == ["Client", "KafkaServer"]
    assert sections["KafkaServer"][0].options == {"user_admin": "a}b;c"}
    [client] = sections["Client"]
    assert (client.login_module, client.options) == (
        DIGEST,
        {"username": "kafka", "password": "s3cret"},
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Client a.B required x=y; };", "section Client \\(line 1\\): expected '{' after"),
        ("Client { a.B required x=y; }", "section Client \\(line 1\\): expected ';' after '}'"),
        ("\n\nClient {\n a.B required x=; };", "section Client \\(line 4\\): expected a value"),
        (
            "Client { a.B required; };\nClient { a.B required; };",
            "line 2: section Client is given twice",
        ),
    ],
)
def test_a_bad_jaas_file_says_where(text: str, message: str) -> None:
    with pytest.raises(JaasError, match=message):
        parse_jaas_file(text)


def test_no_jaas_file_or_no_client_section_is_no_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert zk_login() is None
    jaas(tmp_path, monkeypatch, "KafkaServer { a.B required; };")
    assert zk_login() is None


def test_the_client_section_logs_in_with_digest_md5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = jaas(
        tmp_path,
        monkeypatch,
        f'ZkBroker {{ {DIGEST} required username="kafka" password="s3cret"; }};',
        "-Dzookeeper.sasl.clientconfig=ZkBroker",
    )
    login = zk_login()
    assert login is not None
    assert login.sasl_options() == {
        "mechanism": "DIGEST-MD5",
        "username": "kafka",
        "password": "s3cret",
    }
    assert login.describe() == f"user 'kafka' (DIGEST-MD5, section ZkBroker of {path})"
    assert "s3cret" not in repr(login)


def test_a_krb5_client_section_logs_in_with_gssapi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gssapi")
    path = jaas(
        tmp_path,
        monkeypatch,
        "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        'storeKey=true keyTab="/k/kafka.keytab" principal="kafka/host@REALM"; };',
        "-Dzookeeper.sasl.client.username=zk",
    )
    login = zk_login()
    assert login is not None
    options = login.sasl_options()
    assert (options["mechanism"], options["service"]) == ("GSSAPI/python-gssapi", "zk")
    assert login.describe() == (
        "principal 'kafka/host@REALM' (GSSAPI to service 'zk', keytab /k/kafka.keytab, "
        f"section Client of {path})"
    )


#: The name of 127.0.0.1 (a reverse lookup confirmed forward): localhost, on most machines.
LOOPBACK = service_host("127.0.0.1")
KRB5_SECTION = (
    "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
    'keyTab="/k/kafka.keytab" principal="kafka/host@REALM"; };'
)


@pytest.mark.parametrize(
    ("flags", "server", "host", "expected"),
    [
        # the service, the client's realm or the server's, the address's name
        ((), "zookeeper", LOOPBACK, f"zookeeper/{LOOPBACK}@REALM"),
        (("-Dzookeeper.sasl.client.username=zk",), "zk", LOOPBACK, f"zk/{LOOPBACK}@REALM"),
        (
            ("-Dzookeeper.server.realm=ZK.REALM",),
            "zookeeper",
            LOOPBACK,
            f"zookeeper/{LOOPBACK}@ZK.REALM",
        ),
        # the principal given: as it is (nothing looked up), or with the server's realm
        (
            ("-Dzookeeper.server.principal=zk/zk1.example@R",),
            "zk",
            "zk1.example",
            "zk/zk1.example@R",
        ),
        (
            ("-Dzookeeper.server.principal=zookeeper/zk1", "-Dzookeeper.server.realm=R"),
            "zookeeper",
            "zk1",
            "zookeeper/zk1@R",
        ),
        (("-Dzookeeper.server.principal=zookeeper@R",), "zookeeper", None, "zookeeper@R"),
    ],
)
def test_the_server_principal_from_the_system_properties(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    server: str,
    host: str | None,
    expected: str,
) -> None:
    pytest.importorskip("gssapi")
    jaas(tmp_path, monkeypatch, KRB5_SECTION, *flags)
    login = zk_login()
    assert isinstance(login, ZkKerberosLogin)
    principal = login.server.principal("127.0.0.1", "127.0.0.1")
    assert principal == expected
    assert gss_target(principal) == (server, host)


@pytest.mark.parametrize(
    ("setting", "canonical"),
    [(None, True), ("TRUE", True), ("false", False), ("yes", False)],
)
def test_canonicalization_is_on_unless_the_property_is_not_true(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, canonical: bool
) -> None:
    """Java's Boolean.parseBoolean: `true` in any case is true, anything else false."""
    pytest.importorskip("gssapi")
    flags = () if setting is None else (f"-Dzookeeper.sasl.client.canonicalize.hostname={setting}",)
    jaas(tmp_path, monkeypatch, KRB5_SECTION, *flags)
    login = zk_login()
    assert isinstance(login, ZkKerberosLogin)
    assert login.server.canonicalize is canonical
    # a name of no address: left as it is either way; an address: its name either way
    assert login.server.principal("zk.invalid", "127.0.0.1").startswith(
        f"zookeeper/{LOOPBACK}@" if canonical else "zookeeper/zk.invalid@"
    )
    assert login.server.principal("127.0.0.1", "127.0.0.1") == f"zookeeper/{LOOPBACK}@REALM"


@pytest.mark.parametrize(
    ("flag", "name"),
    [
        ("-Dzookeeper.server.principal=zookeeper/a/b@R", "zookeeper/a/b@R"),
        ("-Dzookeeper.server.principal=zookeeper/a@R@S", "zookeeper/a@R@S"),
        ("-Dzookeeper.server.realm=R/S", "zookeeper/<host>@R/S"),
    ],
)
def test_a_malformed_server_principal_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, name: str
) -> None:
    pytest.importorskip("gssapi")
    jaas(tmp_path, monkeypatch, KRB5_SECTION, flag)
    with pytest.raises(ConfigError, match=f"Malformed Kerberos name: {re.escape(name)}$"):
        zk_login()


@pytest.mark.parametrize(
    ("section", "flags", "message"),
    [
        (
            f'{DIGEST} required username="kafka" password="pw";',
            ("-Dzookeeper.sasl.client=false",),
            "Exception while determining if ZooKeeper is secure .*zookeeper.sasl.client=false.*"
            "JAAS configuration is present, but system property zookeeper.sasl.client is set to "
            "false",
        ),
        (
            "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true "
            'principal="kafka/host@REALM";',
            (),
            "logs in to ZooKeeper with Kerberos from a keytab only: set useKeyTab=true, keyTab "
            "and principal",
        ),
        (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; "
            f'{DIGEST} required username="kafka" password="pw";',
            (),
            f"has com.sun.security.auth.module.Krb5LoginModule, {DIGEST}: wirebroker logs in to "
            "ZooKeeper with one",
        ),
        (f'{DIGEST} required username="kafka";', (), f"{DIGEST} needs password"),
    ],
)
def test_a_client_section_that_cannot_be_used_stops_the_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    section: str,
    flags: tuple[str, ...],
    message: str,
) -> None:
    jaas(tmp_path, monkeypatch, f"Client {{ {section} }};", *flags)
    with pytest.raises(ConfigError, match=message) as raised:
        zk_login()
    assert "pw" not in str(raised.value)


def test_a_missing_jaas_file_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("java.security.auth.login.config", "/nonexistent/jaas.conf")
    with pytest.raises(
        ConfigError,
        match=r"Exception while loading Zookeeper JAAS login context "
        r"\[java.security.auth.login.config=/nonexistent/jaas.conf, .*No such file",
    ):
        zk_login()


def test_set_acl_needs_a_jaas_login_or_client_tls_with_a_keystore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def config(**props: str) -> BrokerConfig:
        return BrokerConfig.from_properties({"zookeeper.connect": "zk:2181", **props})

    assert secure_acls(config(), None) is False
    with pytest.raises(ConfigError, match="zookeeper.set.acl is true, but ZooKeeper client TLS"):
        secure_acls(config(**{"zookeeper.set.acl": "true"}), None)
    tls = {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": "/ks.p12"}
    assert secure_acls(config(**{"zookeeper.set.acl": "true", **tls}), None) is True
    jaas(tmp_path, monkeypatch, f'Client {{ {DIGEST} required username="k" password="p"; }};')
    assert secure_acls(config(**{"zookeeper.set.acl": "true"}), zk_login()) is True


def test_kafkas_default_acls_by_path() -> None:
    secure = [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
    assert znode_acls("/brokers/ids/1", False) == OPEN_ACL_UNSAFE
    assert znode_acls("/brokers/ids/1", True) == secure
    assert znode_acls("/consumers", True) == OPEN_ACL_UNSAFE  # the old consumers' path
    assert znode_acls("/consumers/group", True) == secure
    for sensitive in ("/config/users", "/config/users/alice", "/config/brokers/1"):
        assert znode_acls(sensitive, True) == CREATOR_ALL_ACL, sensitive
    assert znode_acls("/delegation_token/tokens/t1", True) == CREATOR_ALL_ACL
    assert znode_acls("/delegation_token/token_changes", True) == secure
    assert znode_acls("/config/topics/t", True) == secure
