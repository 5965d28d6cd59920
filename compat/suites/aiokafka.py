"""aiokafka's own functional tests (``tests/`` of its repository, at the installed version's tag).

aiokafka's sdist carries no tests (its MANIFEST.in excludes ``tests/``), so ``fetch`` takes
GitHub's archive of the tag ``v<installed version>`` (``build/suites/aiokafka-<version>.tar.gz``,
downloaded unless there) and unpacks what the tests need: ``tests/``, ``pyproject.toml`` (their
pytest configuration: asyncio mode, warnings as errors), ``requirements-ci.txt`` and
``docker/scripts/`` (the JAAS file of aiokafka's broker image). Not ``aiokafka/``: the tests import
the installed client, compiled as users install it. They run in a virtualenv of their own
(``build/suites/aiokafka-<version>-venv``): that aiokafka from PyPI, the test requirements of
aiokafka's CI at its pins (``_REQUIREMENTS``) and pytest-timeout.

Their conftest runs the broker in a Docker container of aiokafka's image;
``compat.suites.aiokafka_fixtures`` (a pytest plugin) puts the target in its place: one broker or
a cluster, whose first broker's addresses the tests are given (clients find the others there).
Each broker gets the image's listeners (``docker/scripts/start-kafka.sh``): PLAINTEXT, which the
tests bootstrap from, SSL requiring a client certificate, SASL_PLAINTEXT and SASL_SSL with PLAIN and
SCRAM-SHA-256/512, whose users are the image's JAAS file ``kafka_server_jaas.conf`` less its
Kerberos login module (no KDC here: GSSAPI is not enabled, and its two tests skip), which both
brokers read from the JVM system property naming it. The certificates are
``tests.wirebroker.pki``'s, under the names the image's ``gen-ssl-certs.sh`` gives. The broker-wide settings of the image
(authorizer, super user, partitions) are ``compat.suites.__main__``'s ``SETTINGS``.

Each test runs as its own pytest process (``compat.suites.pytest_runs``) with its own
pytest-timeout bound, ``--docker-image`` naming Kafka 3.9.0 (the tests read the broker's version
from its tag and skip what needs another; nothing pulls it); its JUnit XML gives the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zlib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

from compat.suites.aiokafka_fixtures import TARGET_ENV
from compat.suites.kafka_scripts import kafka_path
from compat.suites.login_listeners import Listeners, login_listeners
from compat.suites.pytest_runs import run_test
from compat.suites.results import BUILD, ROOT, Outcome
from compat.suites.targets import Target

VERSION = version("aiokafka")
ARCHIVE = BUILD / f"aiokafka-{VERSION}.tar.gz"
ARCHIVE_URL = f"https://github.com/aio-libs/aiokafka/archive/refs/tags/v{VERSION}.tar.gz"
SOURCE = BUILD / f"aiokafka-{VERSION}"
VENV = BUILD / f"aiokafka-{VERSION}-venv"
#: What ``fetch`` unpacks of the repository.
_UNPACKED = ("tests/", "docker/scripts/", "pyproject.toml", "requirements-ci.txt", "LICENSE")
#: The test requirements of aiokafka's CI that its functional tests use, at requirements-ci.txt's
#: pins (``docker`` only for its conftest's import; not gssapi, which builds against MIT krb5).
_REQUIREMENTS = ("pytest", "pytest-asyncio", "pytest-mock", "docker", "async-timeout", "cramjam")
KAFKA_VERSION = "3.9.0"
#: What ``--docker-image`` says: the tests read the Kafka version from the tag after its ``_``.
IMAGE = f"wirebroker-compat-target:2.13_{KAFKA_VERSION}"
#: pytest-timeout's bound, over the tests' own (120 s a test, each cleanup 30 s).
TEST_TIMEOUT_S = 210
#: How long one Kafka tool (kafka-acls.sh, kafka-configs.sh) may take.
TOOL_TIMEOUT_S = 120
PLUGINS = (
    "pytest_asyncio.plugin",
    "pytest_mock",
    "pytest_timeout",
    "compat.suites.aiokafka_fixtures",
)
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The JAAS file's PLAIN user that the image's broker has as its super user (``super.users``).
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin"
#: Where ``listeners`` puts the certificates (under the image's names) and the tools' login.
SSL_FOLDER, ADMIN_PROPERTIES = "ssl_cert", "admin.properties"
_KRB5_MODULE = re.compile(r"\s*com\.sun\.security\.auth\.module\.Krb5LoginModule\b[^;]*;")


def describe() -> str:
    return f"aiokafka {VERSION} `tests/` (tag v{VERSION}), functional tests, Kafka {KAFKA_VERSION}"


def fetch() -> Path:
    """The unpacked tests, and their virtualenv (both made on first use)."""
    if not (SOURCE / "tests" / "conftest.py").exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        if not ARCHIVE.exists():
            print(f"suites: downloading {ARCHIVE_URL}", flush=True)
            partial = ARCHIVE.with_suffix(".partial")
            try:
                urllib.request.urlretrieve(ARCHIVE_URL, partial)
            except OSError as e:  # (urllib's URLError is one)
                raise RuntimeError(
                    f"cannot download {ARCHIVE_URL} ({e}); without GitHub, make the same archive "
                    f"from a clone of aio-libs/aiokafka: git archive --prefix=aiokafka-{VERSION}/ "
                    f"-o {ARCHIVE} v{VERSION}"
                ) from None
            partial.rename(ARCHIVE)
        top = f"aiokafka-{VERSION}/"
        with tarfile.open(ARCHIVE) as archive:
            members = [
                m for m in archive.getmembers() if m.name.removeprefix(top).startswith(_UNPACKED)
            ]
            archive.extractall(BUILD, members=members, filter="data")
    _make_venv(SOURCE)
    return SOURCE


def _python() -> Path:
    return VENV / "bin" / "python"


def _make_venv(src: Path) -> None:
    pins = {}
    for line in (src / "requirements-ci.txt").read_text().splitlines():
        name, _, pinned = line.partition("==")
        if name.strip().lower() in _REQUIREMENTS:
            pins[name.strip().lower()] = pinned.strip()
    missing = set(_REQUIREMENTS) - set(pins)
    if missing:
        raise RuntimeError(f"{src}/requirements-ci.txt pins none of {sorted(missing)}")
    requirements = [f"aiokafka=={VERSION}", f"pytest-timeout=={version('pytest-timeout')}"]
    requirements += [f"{name}=={pinned}" for name, pinned in sorted(pins.items())]
    stamp = VENV / f".installed-{zlib.crc32(' '.join(requirements).encode())}"
    if stamp.exists():
        return
    print(f"suites: making {VENV.name}: {' '.join(requirements)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run(
        [str(_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        + requirements,
        check=True,
    )
    stamp.touch()


@contextlib.contextmanager
def listeners(src: Path) -> Iterator[Listeners]:
    """The image's listeners (``login_listeners``), its certificates under its names, its JAAS
    file and the tools' login."""
    image_jaas = (src / "docker" / "scripts" / "kafka_server_jaas.conf").read_text()
    with login_listeners(
        LISTENERS,
        _KRB5_MODULE.sub("", image_jaas),
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        prefix="aiokafka-suite-",
    ) as made:
        ssl_folder = made.work / SSL_FOLDER
        ssl_folder.mkdir()
        for file, name in (
            (made.pki.ca, "ca.crt"),
            (made.pki.client_cert, "client.crt"),
            (made.pki.client_key, "client.key"),
        ):
            shutil.copy(file, ssl_folder / name)
        (made.work / ADMIN_PROPERTIES).write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";\n'
        )
        yield made


def plugin_target(brokers: Listeners, target: Target) -> str:
    """What the plugin is told of ``target``, started with ``brokers``: its first broker's
    listeners (``TARGET_ENV``)."""

    def port(listener: str) -> int:
        first = target.listeners[listener].split(",")[0]
        return int(first.rpartition(":")[2])

    return json.dumps(
        {
            "host": "127.0.0.1",
            "port": port("PLAINTEXT"),
            "ssl_port": port("SSL"),
            "sasl_plain_port": port("SASL_PLAINTEXT"),
            "sasl_ssl_port": port("SASL_SSL"),
            "ssl_folder": str(brokers.work / SSL_FOLDER),
            "kafka_home": str(kafka_path()),
            "admin": ["--bootstrap-server", target.listeners["SASL_PLAINTEXT"]]
            + ["--command-config", str(brokers.work / ADMIN_PROPERTIES)],
            "tool_timeout": TOOL_TIMEOUT_S,
        }
    )


def _env() -> dict[str, str]:
    """The tests' environment: the plugin importable from the project's root (the packages
    ``compat`` and ``compat.suites`` import nothing)."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def tests(src: Path) -> list[str]:
    """pytest's ids of the functional tests, relative to ``tests/``."""
    argv = [str(_python()), "-m", "pytest", "-p", "no:cacheprovider"]
    for plugin in PLUGINS:
        argv += ["-p", plugin]
    out = subprocess.run(
        argv + [f"--docker-image={IMAGE}", "--collect-only", "-q", "tests"],
        cwd=src,
        env={**_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        check=True,
        capture_output=True,
        text=True,
    )
    return [line.removeprefix("tests/") for line in out.stdout.splitlines() if "::" in line]


def run_one(src: Path, name: str, target_json: str, log: Path) -> Outcome:
    """Run test ``name`` against the target ``target_json`` (``plugin_target``) describes; its
    output is appended to ``log``."""
    return run_test(
        _python(),
        PLUGINS,
        f"tests/{name}",
        cwd=src,
        env={**_env(), TARGET_ENV: target_json},
        timeout_s=TEST_TIMEOUT_S,
        log=log,
        options=[f"--docker-image={IMAGE}"],
    )
