"""JAAS option values, login modules, flags and keys as Java reads them, against Java's own
parsers: Kafka's JaasConfig (through JaasContext) for a `sasl.jaas.config` value, and the JDK
17's ConfigFile for a JAAS file, both java.io.StreamTokenizer set up their own way. Each of
`CASES` is read by both: as a `sasl.jaas.config` value, and as the inside of a file's `Client`
section; `FILES` are whole files. wirebroker must read the options its Java parser reads, or
refuse where it refuses (with its own message). One JVM a parser, all cases in one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wirebroker.jaas_java import (
    jdk_reads,
    kafka_reads,
    refused,
    rendered,
    requires_java,
    requires_kafka_clients,
)
from wirebroker.sasl.jaas_file import parse_jaas_file, read_jaas_file
from wirebroker.sasl.settings import JaasError, parse_jaas_config

pytestmark = pytest.mark.timeout(60)

#: `sasl.jaas.config` values, each also a JAAS file's `Client` section.
CASES = {
    "escapes": r'a.B required k="tab\tnl\ncr\rbs\bff\fbel\avt\v" w=a-b.c$d_e9;',
    "octal": r'a.B required k="\101\0\7x\477\08\1234\3777\q\\\"\'";',
    "escaped-line-break": 'a.B required k="line\\\nnext";',
    "unclosed-quote": 'a.B required k="open\n m=w;',
    "number": "a.B required debug=1;",
    "decimal": "a.B required n=1.5;",
    "negative": "a.B required n=-5;",
    "dash": "a.B required n=-x;",
    "dot": "a.B required n=.hidden;",
    "number-then-word": "a.B required k=1abc;",
    "numeric-key": "a.B required 1=x k=v;",
    "path": "a.B required keyTab=/etc/kafka.keytab;",
    "star": "a.B required k=a*b;",
    "star-names": "a*b required k*=v;",
    "comma": "a.B required k=v, m=w;",
    "no-break-space": "a.B required k=a\u00a0b;",
    "control-blank": "a.B required k=a\x01b=c;",
    "single-quotes": r"a.B required k='single\t' m=w;",
    "quoted-names": '"a.B" "required" "k"="v";',
    "flag-case": "a.B requ\u0131red k=v;",  # dotless i: Java's toUpperCase makes it I
    "quoted-slashes": r'a.B required k="a//b/*c*/" m="\t";',
    "block-comment": "a.B required k=v /* k=x; */ m=w;",
    "line-comment": "a.B required k=v // m=x;\n m=w;",
    "lone-slash": "a.B required k=v /x m=x;\n m=w;",
    "slash-line-break": "a.B required k=v /\n m=x;\n n=u;",
    "slash-crlf": "a.B required k=v /\r\n m=w;",
    "unclosed-comment": "a.B required k=v; /* a.B required",
}
#: Whole JAAS files, for the JDK's parser only.
FILES = {
    "single-quoted-section": "'Client' { a.B required k=v; };",
    "double-quoted-section": '"Client" { a.B required k=v; };',
    "stray-slash": "Client { a.B required k=v; }; / not a section\n",
    "empty-section": "Client { /* a.B required k=v; */ };",
}


def write(tmp_path: Path, texts: dict[str, str]) -> list[Path]:
    paths = []
    for i, text in enumerate(texts.values()):
        path = tmp_path / f"{i}.jaas"
        path.write_bytes(text.encode())
        paths.append(path)
    return paths


def differences(texts: dict[str, str], java: list[str], ours: list[str]) -> dict[str, object]:
    """The cases where one side refuses and the other does not, or both read but differently."""
    return {
        case: {"java": j, "wirebroker": o}
        for case, j, o in zip(texts, java, ours, strict=True)
        if (j.startswith("ERROR") != o.startswith("ERROR"))
        or (not j.startswith("ERROR") and j != o)
    }


def kafka_value(text: str) -> str:
    try:
        return rendered([parse_jaas_config(text)])
    except JaasError as e:
        return refused(e)


def jaas_file(path: Path) -> str:
    try:
        return rendered(read_jaas_file(str(path)).get("Client"))
    except JaasError as e:
        return refused(e)


@requires_kafka_clients
def test_sasl_jaas_config_values_are_read_as_kafka_reads_them(tmp_path: Path) -> None:
    java = kafka_reads(write(tmp_path, CASES))
    ours = [kafka_value(text) for text in CASES.values()]
    assert not differences(CASES, java, ours)
    read = dict(zip(CASES, ours, strict=True))
    assert read["octal"] == "a.B\trequired\tk=A\\u0000\\u0007x'7\\u00008S4\\u00ff7q\\u005c\"'"
    assert read["single-quotes"] == "a.B\trequired\tk=single\\u0009\tm=w"
    assert read["numeric-key"] == "a.B\trequired\tk=v"
    assert read["slash-line-break"] == "a.B\trequired\tk=v\tn=u"
    assert read["number"].startswith("ERROR\tValue not specified for key 'debug' in JAAS config")


#: `sasl.jaas.config` values naming login modules Kafka may disallow.
MODULES = {
    "jndi": "com.sun.security.auth.module.JndiLoginModule required;",
    "ldap": 'com.sun.security.auth.module.LdapLoginModule required userProvider="ldap://x";',
    "quoted-spaces": '" com.sun.security.auth.module.JndiLoginModule " required;',
    "other": "a.B required k=v;",
    "other-listed": "c.D required;",
}


@requires_kafka_clients
@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["-Dorg.apache.kafka.disallowed.login.modules=a.B,c.D"],
        ["-Dorg.apache.kafka.disallowed.login.modules="],
    ],
    ids=["default", "listed", "empty"],
)
def test_disallowed_login_modules_are_refused_as_kafka_refuses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """Kafka 3.9.2's JaasContext refuses a login module named by the system property
    org.apache.kafka.disallowed.login.modules (by default JNDI's and LDAP's; empty: none), the
    module's name trimmed, with a message saying which property to change: ours the same, the
    same message, the property from KAFKA_OPTS."""
    java = kafka_reads(write(tmp_path, MODULES), flags)
    monkeypatch.setenv("KAFKA_OPTS", " ".join(flags))
    ours = [kafka_value(text) for text in MODULES.values()]
    assert dict(zip(MODULES, ours, strict=True)) == dict(zip(MODULES, java, strict=True))
    refusals = [line for line in ours if line.startswith("ERROR")]
    assert len(refusals) == (3 if not flags else 0 if flags[0].endswith("=") else 2)
    if not flags:
        assert ours[0] == (
            "ERROR\tcom.sun.security.auth.module.JndiLoginModule is not allowed. Update System "
            "property 'org.apache.kafka.disallowed.login.modules' to allow "
            "com.sun.security.auth.module.JndiLoginModule"
        )


@requires_java
def test_jaas_files_are_read_as_the_jdk_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KAFKA_OPTS", "java.security.properties", "policy.expandProperties"):
        monkeypatch.delenv(name, raising=False)
    texts = {case: f"Client {{\n{text}\n}};\n" for case, text in CASES.items()} | FILES
    paths = write(tmp_path, texts)
    java = jdk_reads("Client", paths)
    ours = [jaas_file(path) for path in paths]
    assert not differences(texts, java, ours)
    read = dict(zip(texts, ours, strict=True))
    assert read["escapes"] == (
        "a.B\trequired\tk=tab\\u0009nl\\u000acr\\u000dbs\\u0008ff\\u000cbel\\u0007vt\\u000b"
        "\tw=a-b.c$d_e9"
    )
    assert read["star-names"] == "a*b\trequired\tk*=v"
    assert read["single-quotes"].startswith("ERROR\tsection Client (line 2): expected a value")
    assert read["single-quoted-section"] == "a.B\trequired\tk=v"


@pytest.mark.parametrize(
    ("text", "option"),
    [
        ("a.B required password=s3cr3t#x;", "after option password"),
        ("a.B required pin=7531;", "key 'pin'"),
        ("a.B required password=s3cr3t pin=7531 ;", "key 'pin'"),
    ],
)
def test_a_refused_sasl_jaas_config_names_the_option_never_the_value(
    text: str, option: str
) -> None:
    with pytest.raises(JaasError) as refusal:
        parse_jaas_config(text)
    assert option in str(refusal.value)
    assert "s3cr3t" not in str(refusal.value) and "7531" not in str(refusal.value)


@pytest.mark.parametrize(
    ("text", "option"),
    [
        ("password='s3cr3t'", "option password"),  # the JDK's message shows it
        ("pin=7531", "option pin"),
        ("password=s3cr3t#x", "after option password"),
    ],
)
def test_a_refused_jaas_file_names_the_option_never_the_value(text: str, option: str) -> None:
    with pytest.raises(JaasError) as refusal:
        parse_jaas_file(f"Client {{ a.B required {text}; }};")
    assert option in str(refusal.value)
    assert "s3cr3t" not in str(refusal.value) and "7531" not in str(refusal.value)
