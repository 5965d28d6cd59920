"""A pytest plugin (``-p compat.suites.aiokafka_fixtures``) that runs aiokafka's functional tests
against a broker already running, without Docker.

aiokafka's ``tests/conftest.py`` starts its broker in a Docker container of its own image:
``ssl_folder`` has the image generate certificates, ``kafka_server`` runs the image with four
listeners on ports it picks (and ``kafka_image`` and ``docker``, which only those two request,
pull the image), the ACL and SCRAM helpers (``ACLManager``, ``KafkaConfig`` in
``tests/_testutil.py``) run Kafka's ``kafka-acls.sh`` and ``kafka-configs.sh`` in the container
with ``exec_run``, and ``kerberos_utils`` makes a keytab for the image's KDC. When that module
registers, this plugin puts in place of those fixtures ones that take the target from
``TARGET_ENV`` (JSON written by ``compat/suites/aiokafka.py``):

- ``ssl_folder``: the target's CA, client certificate and key, under aiokafka's file names;
- ``kafka_server``: the target's four listeners (a cluster's first broker's), and as its container a ``Container`` whose
  ``exec_run`` runs the same Kafka script of a Kafka home around the jars, against the target's
  SASL_PLAINTEXT listener as the JAAS file's super user where the command names ZooKeeper
  (``--zookeeper localhost:2181``, ``--authorizer-properties zookeeper.connect=localhost:2181``):
  the targets include a broker with no ZooKeeper, and the broker's own API is what Kafka's tools
  use today;
- ``kerberos_utils``: its ``kinit`` skips the test (no KDC: GSSAPI is not enabled on the targets).

``--docker-image`` still names the broker's version (``setup_test_class`` and the helpers read it
from the tag). Only the tests that need a broker (``kafka_server`` or ``ssl_folder``) are
collected; the unit tests test the client alone.

This module runs in the suite's own virtualenv (aiokafka's test requirements): it imports only
the standard library and pytest.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import unittest
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

#: The environment variable holding the target: ``host``, ``port``, ``ssl_port``,
#: ``sasl_plain_port``, ``sasl_ssl_port``, ``ssl_folder``, ``kafka_home`` (whose ``bin/`` has
#: Kafka's scripts), ``admin`` (the arguments that replace a ZooKeeper address) and
#: ``tool_timeout`` (seconds).
TARGET_ENV = "WIREBROKER_AIOKAFKA_TARGET"
#: What a command names ZooKeeper with, in ``tests/_testutil.py``.
_ZOOKEEPER = {"--zookeeper": "localhost:2181", "--authorizer-properties": "zookeeper.connect="}


def _target() -> dict[str, Any]:
    target: dict[str, Any] = json.loads(os.environ[TARGET_ENV])
    return target


class Container:
    """Runs the commands aiokafka's helpers give a container, from the jars."""

    def __init__(self, kafka_home: Path, admin: list[str], timeout: float) -> None:
        self.bin = kafka_home / "bin"
        self.admin = admin
        self.timeout = timeout

    def exec_run(self, cmd: str) -> tuple[int, bytes]:
        """``(exit code, stdout and stderr)``, as Docker's ``exec_run`` answers."""
        words = shlex.split(cmd)
        script = self.bin / Path(words[0]).name
        if not script.is_file():
            return 127, f"{words[0]}: not in {self.bin}".encode()
        argv = [str(script)]
        rest = iter(words[1:])
        for word in rest:
            if word in _ZOOKEEPER:
                value = next(rest, "")
                if not value.startswith(_ZOOKEEPER[word]):
                    raise ValueError(f"{word} {value}: not the ZooKeeper of aiokafka's image")
                argv += self.admin
            else:
                argv.append(word)
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=self.timeout,
            check=False,
        )
        return proc.returncode, proc.stdout


class KerberosUtils:
    """No KDC: a test that logs in with Kerberos is skipped where it would ``kinit``."""

    def kinit(self, principal: str) -> None:
        raise unittest.SkipTest("GSSAPI: the targets enable no Kerberos (no KDC)")

    def kdestroy(self) -> None:
        pass


@pytest.fixture(scope="session")
def ssl_folder() -> Path:
    return Path(_target()["ssl_folder"])


@pytest.fixture(scope="class")
def kerberos_utils() -> KerberosUtils:
    return KerberosUtils()


_conftest: list[ModuleType] = []  # aiokafka's tests/conftest.py, once registered


@pytest.fixture(scope="session")
def kafka_server() -> Any:
    """aiokafka's own ``KafkaServer`` of the target."""
    t = _target()
    container = Container(Path(t["kafka_home"]), t["admin"], t["tool_timeout"])
    return _conftest[0].KafkaServer(
        t["host"], t["port"], t["ssl_port"], t["sasl_plain_port"], t["sasl_ssl_port"], container
    )


_REPLACED = {
    "ssl_folder": ssl_folder,
    "kafka_server": kafka_server,
    "kerberos_utils": kerberos_utils,
}


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: object, plugin_name: str) -> None:
    """Before pytest reads the fixtures of aiokafka's conftest, put these in place of its own."""
    if isinstance(plugin, ModuleType) and plugin_name.endswith("tests/conftest.py"):
        if not all(hasattr(plugin, name) for name in _REPLACED):
            raise pytest.UsageError(f"{plugin_name} lacks one of {sorted(_REPLACED)}")
        for name, fixture in _REPLACED.items():
            setattr(plugin, name, fixture)
        _conftest.append(plugin)


_BROKER = frozenset({"kafka_server", "ssl_folder"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests that need the broker (which skip without ``--docker-image``)."""
    unit = [item for item in items if not _BROKER & set(getattr(item, "fixturenames", ()))]
    if unit:
        config.hook.pytest_deselected(items=unit)
        items[:] = [item for item in items if item not in unit]
