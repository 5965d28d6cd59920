"""kafka-python's own integration tests (``test/integration/``), from its source distribution.

``fetch`` downloads the sdist of the installed kafka-python from PyPI (``pip download
--no-binary :all:``) and unpacks it into ``build/suites/``. The sdist has ``test/integration/``
(its conftest, fixtures and tests) but not two modules of ``test/`` they import, which ``fetch``
writes in their place: ``test/__init__.py`` (kafka-python's makes a callback that raises fail the
test, as this one does) and ``test/service.py``, the wrapper of the processes the fixtures spawn,
of which only the external broker is written; nor the fixtures' broker templates (``servers/``),
of which ``fetch`` writes the one the SASL tests' Kafka tool reads (``sasl_command.conf``).

The suite runs in the fixtures' external-broker mode: ``KAFKA_URI=tcp://host:port`` makes every
test's broker the target's (a cluster's first broker, from which the clients find the others),
``KAFKA_VERSION`` says which broker it is (3.9.0: the tests of 4.x brokers skip themselves) and
``KAFKA_ROOT`` is ``compat.suites.kafka_scripts.kafka_path`` (Kafka's scripts around the jars).
The SSL and SASL tests ask the fixtures for brokers of their own, which the pytest plugin
``compat.suites.kafka_python_fixtures`` takes from the target (a cluster's first broker's, from
which clients find the others): ``listeners`` gives each broker (beside PLAINTEXT) an SSL
listener that asks no client certificate and a SASL_PLAINTEXT one with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 (``login_listeners``: the JAAS file ``_JAAS``, read by Kafka's JVM and wirebroker
alike, has PLAIN's user), and ``add_users`` makes the fixtures' SCRAM user once the brokers are
up; the SASL tests, which skip themselves on an external broker, run without ``KAFKA_URI``.

Each test runs as its own pytest process from the unpacked folder (so its ``kafka`` package is the
sdist's, the installed version's source) with its own pytest-timeout bound and only the plugins of
``PLUGINS`` (pytest-timeout, which the suite's configuration asks for, and the fixtures'); its
JUnit XML gives the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

from compat.suites.kafka_python_fixtures import TARGET_ENV
from compat.suites.kafka_scripts import kafka_path
from compat.suites.login_listeners import Listeners, login_listeners
from compat.suites.pytest_runs import run_test
from compat.suites.results import BUILD, ROOT, Outcome
from compat.suites.targets import Target, add_scram_user

VERSION = version("kafka-python")
SOURCE = BUILD / f"kafka-python-{VERSION}"
KAFKA_VERSION = "3.9.0"
TEST_TIMEOUT_S = 120  # pytest-timeout's bound
PLUGINS = ("pytest_timeout", "compat.suites.kafka_python_fixtures")
#: The listeners of the brokers its SSL and SASL tests spawn.
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: The SASL user of kafka-python's fixtures (``KafkaFixture.broker_user``, ``broker_password``).
USER, PASSWORD = "alice", "alice-secret"
#: Where ``listeners`` puts the CA, as ``ca-cert``.
SSL_DIR = "ssl"
#: The fixtures' broker's JAAS file (its template is in ``servers/``, not in the sdist) with every
#: mechanism of ``MECHANISMS`` in one: PLAIN's user, and SCRAM's module (its users are the
#: broker's credentials, made once it is up).
_JAAS = f"""KafkaServer {{
  org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";
  org.apache.kafka.common.security.scram.ScramLoginModule required;
}};
"""
#: The fixtures' template (``servers/resources/default/``) of the login Kafka's tools use on
#: their SASL broker, rendered with the fixture's attributes.
_SASL_COMMAND_CONF = """security.protocol={transport}
sasl.mechanism={sasl_mechanism}
sasl.jaas.config={jaas_config}
"""
_TEST_INIT = '''"""Written by wirebroker's compat/suites/kafka_python.py: kafka-python's test/__init__.py
is not in its sdist. As that one does, a callback that raises fails the test."""

from kafka.future import Future

Future.error_on_callbacks = True
'''
_TEST_SERVICE = '''"""Written by wirebroker's compat/suites/kafka_python.py: kafka-python's test/service.py is
not in its sdist. Only the external broker is provided."""


class ExternalService:
    """A broker already running at host:port: nothing to start, stop or read."""

    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        pass


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "this test spawns a process: compat/suites gives kafka-python's tests only external "
            "brokers (KAFKA_URI, and the target's listeners through the plugin "
            "compat.suites.kafka_python_fixtures), as the sdist has no servers/ templates"
        )
'''


def describe() -> str:
    return f"kafka-python {VERSION} `test/integration` (sdist), KAFKA_VERSION={KAFKA_VERSION}"


def fetch() -> Path:
    """The unpacked sdist with the stand-ins written (downloaded on first use)."""
    if not (SOURCE / "test" / "integration" / "conftest.py").exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        print(f"suites: downloading kafka-python {VERSION}'s sdist from PyPI", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:"]
            + ["--no-deps", "--dest", str(BUILD), f"kafka-python=={VERSION}"],
            check=True,
        )
        with tarfile.open(BUILD / f"kafka_python-{VERSION}.tar.gz") as sdist:
            sdist.extractall(BUILD / "kafka-python-sdist", filter="data")
        (BUILD / "kafka-python-sdist" / f"kafka_python-{VERSION}").rename(SOURCE)
        (BUILD / "kafka-python-sdist").rmdir()
    (SOURCE / "test" / "__init__.py").write_text(_TEST_INIT)
    (SOURCE / "test" / "service.py").write_text(_TEST_SERVICE)
    resources = SOURCE / "servers" / "resources" / "default"
    resources.mkdir(parents=True, exist_ok=True)
    (resources / "sasl_command.conf").write_text(_SASL_COMMAND_CONF)
    return SOURCE


@contextlib.contextmanager
def listeners() -> Iterator[Listeners]:
    """The listeners of the brokers the SSL and SASL tests spawn: SSL with the CA as
    ``SSL_DIR/ca-cert`` and no client certificate asked (as the fixtures' broker), and
    SASL_PLAINTEXT with ``MECHANISMS``."""
    with login_listeners(
        LISTENERS,
        _JAAS,
        MECHANISMS,
        prefix="kafka-python-suite-",
        overrides={"ssl.client.auth": "none"},
    ) as made:
        ssl_dir = made.work / SSL_DIR
        ssl_dir.mkdir()
        shutil.copy(made.pki.ca, ssl_dir / "ca-cert")
        yield made


def plugin_target(brokers: Listeners, target: Target) -> str:
    """What the plugin is told of ``target``, started with ``brokers`` (``TARGET_ENV``): its
    first broker's SSL and SASL_PLAINTEXT ports."""
    ports = {}
    for name in ("SSL", "SASL_PLAINTEXT"):
        first = target.listeners[name].split(",")[0]
        ports[name] = int(first.rpartition(":")[2])
    return json.dumps(
        {
            "host": "127.0.0.1",
            "ports": ports,
            "ssl_dir": str(brokers.work / SSL_DIR),
            "user": USER,
            "password": PASSWORD,
        }
    )


def add_users(target: Target) -> None:
    """The fixtures' SCRAM user, as their broker has it, on ``target`` started with
    ``listeners`` (PLAIN's is in the JAAS file)."""
    add_scram_user(
        target.bootstrap,
        target.listeners["SASL_PLAINTEXT"],
        USER,
        PASSWORD,
        [m for m in MECHANISMS if m.startswith("SCRAM-")],
    )


def _env(bootstrap: str) -> dict[str, str]:
    """The fixtures' environment (the plugin importable from the project's root)."""
    return {
        **os.environ,
        "KAFKA_URI": f"tcp://{bootstrap.split(',')[0]}",
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_ROOT": str(kafka_path()),
        "PYTHONPATH": str(ROOT),
    }


def tests(src: Path) -> list[str]:
    """pytest's ids of the tests, relative to ``test/integration/``."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_timeout"]
        + ["--collect-only", "-q", "test/integration"],
        cwd=src,
        # what the fixtures read at collection (nothing connects); no plugin but pytest-timeout:
        # the venv's others (hypothesis's) take seconds
        env={**_env("localhost:9092"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        check=True,
        capture_output=True,
        text=True,
    )
    prefix = "test/integration/"
    return [line.removeprefix(prefix) for line in out.stdout.splitlines() if "::" in line]


def run_one(src: Path, name: str, target: Target, target_json: str, log: Path) -> Outcome:
    """Run test ``name`` against ``target``, whose listeners ``target_json`` (``plugin_target``)
    describes; its output is appended to ``log``."""
    env = {**_env(target.bootstrap), TARGET_ENV: target_json}
    if name.startswith("test_sasl_integration.py"):
        del env["KAFKA_URI"]  # they skip themselves on it; their broker is the plugin's
    return run_test(
        sys.executable,
        PLUGINS,
        f"test/integration/{name}",
        cwd=src,
        env=env,
        timeout_s=TEST_TIMEOUT_S,
        log=log,
    )
