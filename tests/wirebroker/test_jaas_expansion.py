"""`${property}` expansion in JAAS files, against the JDK's own: the same files and the same
`-D` flags read by Java's ConfigFile (JaasConfig.java, run by the JDK 17 that runs Kafka) and by
wirebroker (the flags in KAFKA_OPTS) give the same options, or both refuse the file. Also: the
JAAS file's own name is expanded, and an expanded password is never in a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wirebroker.jaas_java import jdk_reads, refused, rendered, requires_java
from wirebroker.config import ConfigError
from wirebroker.sasl.jaas_file import read_jaas_file
from wirebroker.sasl.settings import JaasError
from wirebroker.zk.sasl_login import zk_login

pytestmark = pytest.mark.timeout(60)

DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"

#: Option values as written in the file (inside the quotes), each in a file of its own.
VALUES = [
    "${wb.password}",
    "${user.home}${/}kafka.keytab",
    "${user.dir}",
    "${wb.password}${wb.password}",
    "$${wb.password}",
    "}${wb.password}{",
    "x${wb.unclosed",
    "${wb.unclosed",
    "${{wb.password}}",
    "${{wb.password}}z",
    "a${{b}}${wb.password}c${{d",
    "${{wb.unclosed",
    "\\${wb.password}",
    "x${wb.empty}",
    "plain",
    "",
    "${wb.unset}",
    "${wb.empty}",
    "a${}b",
    "${ wb.password }",
]
FLAGS = ["-Dwb.password=s3cr3t", "-Dwb.empty="]


@pytest.fixture(autouse=True)
def _no_system_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_OPTS", "java.security.auth.login.config", "java.security.properties"):
        monkeypatch.delenv(name, raising=False)


def jaas_files(tmp_path: Path, values: list[str]) -> list[Path]:
    paths = []
    for i, value in enumerate(values):
        path = tmp_path / f"{i}.jaas"
        path.write_text(f'Client {{\n  a.B required k="{value}" n=v;\n}};\n')
        paths.append(path)
    return paths


def wirebroker_reads(path: Path) -> str:
    """The same as `jdk_reads`, by wirebroker (the message after `ERROR` is its own)."""
    try:
        return rendered(read_jaas_file(str(path)).get("Client"))
    except JaasError as e:
        return refused(e)


def same(java: str, ours: str) -> bool:
    """Both read the same options, or both refuse (ours naming the property the JDK names)."""
    if java.startswith("ERROR") or ours.startswith("ERROR"):
        name = java.removeprefix("ERROR\tunable to expand property ")
        return ours.startswith("ERROR") and (name == java or ours.endswith(name))
    return java == ours


@requires_java
@pytest.mark.parametrize(
    ("security", "expanded"),
    [
        (None, True),
        ("policy.expandProperties=false\n", False),
        ("policy.expandProperties=FALSE\n", True),
    ],
    ids=["expanded", "expansion-off", "not-exactly-false"],
)
def test_option_values_are_expanded_as_the_jdk_expands_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, security: str | None, expanded: bool
) -> None:
    """`security`: the text of a java.security.properties file (`==`, replacing the JDK's
    java.security, would leave the JDK without its security providers, JAAS included)."""
    flags = [*FLAGS, "-Dpolicy.expandProperties=false"]  # alone: java.security sets it true
    if security is not None:
        (tmp_path / "java.security").write_text(f"# the deployment's\n{security}")
        flags.append(f"-Djava.security.properties={tmp_path / 'java.security'}")
    monkeypatch.setenv("KAFKA_OPTS", " ".join(flags))
    paths = jaas_files(tmp_path, VALUES)
    java = jdk_reads("Client", paths, flags)
    ours = [wirebroker_reads(p) for p in paths]
    differ = {v: (j, o) for v, j, o in zip(VALUES, java, ours, strict=True) if not same(j, o)}
    assert not differ
    read = dict(zip(VALUES, ours, strict=True))
    if expanded:
        assert read["${wb.password}"] == "a.B\trequired\tk=s3cr3t\tn=v"
        assert read["${wb.unset}"] == (
            "ERROR\tsection Client (line 2): option k: unable to expand property wb.unset"
        )
        assert read["${wb.empty}"] == (
            "ERROR\tsection Client (line 2): option k: system property [${wb.empty}] expanded "
            "to empty value"
        )
    else:
        assert read["${wb.unset}"] == "a.B\trequired\tk=${wb.unset}\tn=v"


def test_the_jaas_file_s_own_name_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "client.jaas").write_text(
        f'Client {{ {DIGEST} required username="kafka" password="${{zk.password}}"; }};'
    )
    name = "${wb.jaas.dir}${/}client.jaas"
    opts = f"-Dwb.jaas.dir={tmp_path} -Djava.security.auth.login.config=={name}"
    monkeypatch.setenv("KAFKA_OPTS", f"{opts} -Dzk.password=s3cr3t")
    login = zk_login()
    assert login is not None
    assert login.sasl_options()["password"] == "s3cr3t"
    assert login.source == f"section Client of {tmp_path / 'client.jaas'}"
    assert "s3cr3t" not in repr(login)

    monkeypatch.setenv("KAFKA_OPTS", opts.replace("-Dwb.jaas.dir", "-Dwb.elsewhere"))
    with pytest.raises(ConfigError, match=r"Unable to properly expand \$\{wb.jaas.dir\}"):
        zk_login()


def test_an_expanded_password_is_never_in_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A section refused for another option, or for a missing one, never shows the password
    its `${...}` gave."""
    sections = [
        f'{DIGEST} required username="${{wb.unset}}" password="${{zk.password}}";',
        f'{DIGEST} required password="${{zk.password}}";',
        f'{DIGEST} required username="kafka" password="${{zk.password}}"; a.B required;',
    ]
    for section in sections:
        path = tmp_path / "client.jaas"
        path.write_text(f"Client {{ {section} }};")
        opts = f"-Djava.security.auth.login.config={path} -Dzk.password=s3cr3t"
        monkeypatch.setenv("KAFKA_OPTS", opts)
        with pytest.raises(ConfigError) as raised:
            zk_login()
        assert "s3cr3t" not in str(raised.value)
