"""A configuration Kafka 3.9 and wirebroker must both refuse at start, run on each: Kafka from the
jars (`kafka_refuses`: it must exit, and its log's exception gives Kafka's words) and
`wirebroker serve` (`wirebroker_refuses`: it must exit 2, and its standard error is returned for
the caller to find those words in), with the same properties and JVM options (`KAFKA_OPTS`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from compat.kafka_process import KafkaProcessError, kafka_broker


def kafka_refuses(
    zk_connect: str,
    plaintext: int,
    props: Mapping[str, str],
    workdir: Path,
    exception: str,
    jvm_options: Sequence[str] = (),
) -> str:
    """Kafka's message: what follows `exception` (a regex of the exception's name and the
    start of its message, the message in the group) in the log of the broker that exited."""
    with (
        pytest.raises(KafkaProcessError, match="exited"),
        kafka_broker(
            zk_connect, port=plaintext, overrides=props, jvm_options=jvm_options, workdir=workdir
        ),
    ):
        pass
    kafka_log = (workdir / "kafka.log").read_text(errors="replace")
    found = re.search(exception, kafka_log)
    assert found is not None, kafka_log[-3000:]
    return found[1].strip()


def wirebroker_refuses(
    props: Mapping[str, str], log_dirs: Path, jvm_options: Sequence[str] = ()
) -> str:
    """The standard error of `wirebroker serve` refusing `props` (exit code 2)."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}
    if jvm_options:
        env["KAFKA_OPTS"] = " ".join(jvm_options)
    overrides = [
        arg for k, v in props.items() if k != "listeners" for arg in ("--override", f"{k}={v}")
    ]
    done = subprocess.run(
        [sys.executable, "-m", "wirebroker", "serve", "--listeners", props["listeners"]]
        + ["--log-dirs", str(log_dirs), *overrides],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr
