"""kafka-python's own integration tests (``test/integration/``), from its source distribution.

``fetch`` downloads the sdist of the installed kafka-python from PyPI (``pip download
--no-binary :all:``) and unpacks it into ``build/suites/``. The sdist has ``test/integration/``
(its conftest, fixtures and tests) but not two modules of ``test/`` they import, which ``fetch``
writes in their place: ``test/__init__.py`` (kafka-python's makes a callback that raises fail the
test, as this one does) and ``test/service.py``, the wrapper of the processes the fixtures spawn,
of which only the external broker is written: the sdist lacks the broker templates
(``servers/``) too, so the suite runs in its external-broker mode only.

That mode is the fixtures' own: ``KAFKA_URI=tcp://host:port`` makes every test's broker the
target's (a cluster's first broker, from which the clients find the others), ``KAFKA_VERSION``
says which broker it is (3.9.0: the tests of 4.x brokers skip themselves, and so do its SASL
tests, which need brokers of their own), and ``KAFKA_ROOT`` is a folder the fixture checks exists
(a Kafka distribution, of which nothing runs in this mode). Its SSL tests spawn their broker
regardless, and fail so on every target.

Each test runs as its own pytest process from the unpacked folder (so its ``kafka`` package is the
sdist's, the installed version's source) with its own pytest-timeout bound and no other plugin
(the suite's configuration asks for that one); its JUnit XML gives the outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path

from compat.suites.pytest_runs import run_test
from compat.suites.results import BUILD, Outcome
from compat.suites.targets import Target

VERSION = version("kafka-python")
SOURCE = BUILD / f"kafka-python-{VERSION}"
KAFKA_VERSION = "3.9.0"
TEST_TIMEOUT_S = 120  # pytest-timeout's bound
_TEST_INIT = '''"""Written by wirebroker's compat/suites/kafka_python.py: kafka-python's test/__init__.py
is not in its sdist. As that one does, a callback that raises fails the test."""

from kafka.future import Future

Future.error_on_callbacks = True
'''
_TEST_SERVICE = '''"""Written by wirebroker's compat/suites/kafka_python.py: kafka-python's test/service.py is
not in its sdist. Only the external broker (KAFKA_URI) is provided."""


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
            "this test spawns its own broker: compat/suites runs kafka-python's suite only "
            "against an external broker (KAFKA_URI), as the sdist has no servers/ templates"
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
    (SOURCE / "kafka-root").mkdir(exist_ok=True)
    return SOURCE


def _env(bootstrap: str) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_URI": f"tcp://{bootstrap.split(',')[0]}",
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_ROOT": str(SOURCE / "kafka-root"),
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


def run_one(src: Path, name: str, target: Target, log: Path) -> Outcome:
    """Run test ``name`` against ``target``; its output is appended to ``log``."""
    return run_test(
        sys.executable,
        ["pytest_timeout"],
        f"test/integration/{name}",
        cwd=src,
        env=_env(target.bootstrap),
        timeout_s=TEST_TIMEOUT_S,
        log=log,
    )
