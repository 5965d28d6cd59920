"""A pytest plugin (``-p compat.suites.kafka_python_fixtures``) that gives kafka-python's SSL and
SASL integration tests the target's listeners in place of the brokers their fixtures spawn.

kafka-python's ``test/integration/fixtures.py`` spawns a broker (ZooKeeper and Kafka, from
templates of ``servers/`` that its sdist lacks) whenever a test asks ``KafkaFixture.instance`` for
one that is not external: the SSL tests' ``ssl_kafka`` (transport SSL; clients trust
``<ssl_dir>/ca-cert`` and present no certificate) and the SASL tests' ``sasl_kafka``, through
``kafka_broker_factory`` when ``KAFKA_URI`` is unset (transport SASL_PLAINTEXT, one of PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512, logging in as ``KafkaFixture.broker_user``). When that module's
conftest registers, this plugin makes ``KafkaFixture.instance`` answer such a request with the
fixture of an external broker, as ``KAFKA_URI`` gives, at the target's listener of that transport
(a cluster's first broker's; from ``TARGET_ENV``, JSON written by
``compat/suites/kafka_python.py``): the same fixture the tests use everywhere, with its
``ssl_dir`` the target's and, for the SASL tests, the temporary folder and login
(``jaas_config``) its ``get_topic_names`` gives Kafka's ``kafka-topics.sh``, as its ``open``
would have set them.
"""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

import py
import pytest

#: The environment variable holding the target: ``host``, ``ports`` (transport -> port),
#: ``ssl_dir`` (a folder with the CA as ``ca-cert``), ``user`` and ``password`` (the SASL user the
#: target has, which must be the fixtures' ``broker_user``).
TARGET_ENV = "WIREBROKER_KAFKA_PYTHON_TARGET"


def _instance(original: Any) -> Any:
    """``KafkaFixture.instance``, answering a request to spawn a broker with the target's."""

    def instance(cls: Any, broker_id: int, **params: Any) -> Any:
        if params.get("external"):
            return original(broker_id, **params)
        if TARGET_ENV not in os.environ:
            raise pytest.UsageError(f"{TARGET_ENV} does not say where the target's listeners are")
        target = json.loads(os.environ[TARGET_ENV])
        transport = params.get("transport", "PLAINTEXT").upper()
        if transport not in target["ports"]:
            raise pytest.UsageError(f"the target has no {transport} listener")
        if (cls.broker_user, cls.broker_password) != (target["user"], target["password"]):
            raise pytest.UsageError(f"the target's SASL user is not {cls.broker_user}")
        fixture = cls(
            target["host"],
            target["ports"][transport],
            broker_id,
            external=True,
            transport=transport,
            sasl_mechanism=params.get("sasl_mechanism"),
            replicas=params.get("replicas", 1),
            partitions=params.get("partitions", 4),
            tmp_dir=params.get("tmp_dir") or py.path.local.mkdtemp(),
        )
        if fixture.ssl_enabled:
            fixture.ssl_dir = target["ssl_dir"]
        fixture.jaas_config = fixture._jaas_config()
        return fixture

    return classmethod(instance)


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: object, plugin_name: str) -> None:
    """Before a test asks for a broker, put ``_instance`` in place of the fixtures' own."""
    if isinstance(plugin, ModuleType) and plugin_name.endswith("test/integration/conftest.py"):
        kafka_fixture = getattr(plugin, "KafkaFixture", None)
        if kafka_fixture is None:
            raise pytest.UsageError(f"{plugin_name} has no KafkaFixture")
        kafka_fixture.instance = _instance(kafka_fixture.instance)
