"""Java's own JAAS parsers for differential tests (test_jaas_expansion, test_jaas_parsing): the
JDK 17's ConfigFile over JAAS files, Kafka's JaasContext over `sasl.jaas.config` values, both
run by JaasConfig.java in one JVM a call, and wirebroker's reading of the same written as Java's
(`rendered`, `refused`)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from wirebroker.sasl.settings import JaasEntry, JaasError
from wirebroker.zookeeper_server import jars_dir

JAVA = shutil.which("java")
requires_java = pytest.mark.skipif(JAVA is None, reason="java is not installed")
requires_kafka_clients = pytest.mark.skipif(
    JAVA is None or not any(jars_dir().glob("kafka-clients-*.jar")),
    reason=f"java or the kafka-clients jar in {jars_dir()} is missing: run `make jars`",
)
_SOURCE = Path(__file__).with_name("JaasConfig.java")


def _run(args: Sequence[str], flags: Sequence[str] = ()) -> list[str]:
    assert JAVA is not None
    command = [JAVA, *flags, str(_SOURCE), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


def jdk_reads(section: str, paths: Sequence[Path], flags: Sequence[str] = ()) -> list[str]:
    """What the JDK's ConfigFile reads of `section` of each file (`flags`: the JVM's `-D`s)."""
    return _run(["file", section, *map(str, paths)], flags)


def kafka_reads(paths: Sequence[Path], flags: Sequence[str] = ()) -> list[str]:
    """What Kafka's JaasContext reads of each file's text as a `sasl.jaas.config` value
    (`flags`: the JVM's `-D`s)."""
    return _run(["kafka", *map(str, paths)], ["-cp", f"{jars_dir()}/*", *flags])


def rendered(entries: list[JaasEntry] | None) -> str:
    """`entries` as JaasConfig.java prints Java's."""
    if entries is None:
        return "NONE"
    return "\t|\t".join(
        "\t".join(
            [
                _escaped(entry.login_module),
                entry.control_flag,
                *(
                    f"{_escaped(k)}={_escaped(v)}"
                    for k, v in sorted(entry.options.items(), key=lambda kv: _utf16(kv[0]))
                ),
            ]
        )
        for entry in entries
    )


def refused(error: JaasError) -> str:
    """A refusal as JaasConfig.java prints Java's (the message is wirebroker's own)."""
    return f"ERROR\t{_escaped(str(error))}"


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def _escaped(text: str) -> str:
    """As JaasConfig.java: each UTF-16 unit outside printable ASCII, and `\\`, as `\\uXXXX`."""
    units = _utf16(text)
    return "".join(
        chr(unit) if " " <= chr(unit) <= "~" and unit != 0x5C else f"\\u{unit:04x}"
        for unit in (int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2))
    )
