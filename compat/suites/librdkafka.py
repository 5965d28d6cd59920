"""librdkafka's own test suite, from Debian's source package.

``fetch_and_build`` runs ``apt-get source librdkafka`` into ``build/suites/`` (enabling Debian's
deb-src lines first when apt knows none, and ``apt-get build-dep`` as root), then ``configure``,
the library and the ``test-runner``. Kafka's CLI tools, which some tests call through
``$KAFKA_PATH/bin/*.sh``, are wrapped in ``build/suites/kafka/bin/`` around the jars of
``make jars`` (``libs/`` links to them, for the Java helpers some tests compile and run).

Each numbered test runs as its own ``test-runner`` process (``TESTS=<number>``), in quick mode
(``-Q``, the suite's CI mode) or full mode, without sockem tests (``-E``), with
``TEST_KAFKA_VERSION=3.9.0``: a test that hangs is killed by the runner's own watchdog (which
ends the process) or at ``TEST_TIMEOUT_S``, and fails alone. The runner's JSON report gives each
test's state; tests it skips (SASL/SSL without such listeners, mock-cluster-only paths, known
issues) are skips on every target. On a secured target every client of the suite connects over
TLS with a client certificate (``test.conf``), on a SASL one over SASL_PLAINTEXT as the target's
SCRAM user (which also runs the suite's SASL credentials test, 0135), while Kafka's tools and the
Java helpers (``BROKERS``) use the broker's PLAINTEXT listener.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from compat.suites.kafka_scripts import kafka_path
from compat.suites.results import BUILD, Outcome
from compat.suites.targets import SCRAM_MECHANISM, Target

KAFKA_VERSION = "3.9.0"
TEST_TIMEOUT_S = 900
DEB_SRC = Path("/etc/apt/sources.list.d/wirebroker-deb-src.sources")
_TEST_DECL = re.compile(r"^_TEST_DECL\((\d{4})_(\w+)\);", re.M)


def source_dir() -> Path | None:
    found = sorted(BUILD.glob("librdkafka-*/tests/test.c"))
    return found[-1].parents[1] if found else None


def describe(mode: str) -> str:
    src = source_dir()
    version = src.name.removeprefix("librdkafka-") if src else "?"
    return f"librdkafka {version} (Debian's source) tests, {mode} mode, TEST_KAFKA_VERSION={KAFKA_VERSION}"


def fetch_and_build() -> Path:
    """The built source tree (fetched and built on first use)."""
    src = source_dir()
    if src is None:
        BUILD.mkdir(parents=True, exist_ok=True)
        root = os.geteuid() == 0
        if root and not _has_deb_src():
            print(f"suites: enabling Debian's source packages ({DEB_SRC})", flush=True)
            DEB_SRC.write_text(_deb_src_lines())
        if root:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "dpkg-dev"],
                check=True,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
            subprocess.run(
                ["apt-get", "build-dep", "-y", "-qq", "librdkafka"],
                check=True,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
        subprocess.run(["apt-get", "source", "-qq", "librdkafka"], cwd=BUILD, check=True)
        src = source_dir()
        if src is None:
            raise RuntimeError("apt-get source librdkafka gave no tests/test.c")
    if not (src / "tests" / "test-runner").exists():
        print(f"suites: building {src.name} and its test-runner (a few minutes)", flush=True)
        nice = ["nice", "-n", "10"]
        subprocess.run([*nice, "./configure", "--disable-valgrind"], cwd=src, check=True)
        subprocess.run([*nice, "make", "-j2", "libs"], cwd=src, check=True)
        subprocess.run([*nice, "make", "-j2", "-C", "tests", "build"], cwd=src, check=True)
    return src


def _has_deb_src() -> bool:
    lists = list(Path("/etc/apt").glob("sources.list*")) + list(
        Path("/etc/apt/sources.list.d").glob("*")
    )
    return any("deb-src" in p.read_text(errors="replace") for p in lists if p.is_file())


def _deb_src_lines() -> str:
    """deb-src twins of the machine's deb822 Debian sources."""
    text = Path("/etc/apt/sources.list.d/debian.sources").read_text()
    stanzas = [s for s in text.split("\n\n") if "Types: deb" in s]
    return "\n\n".join(s.replace("Types: deb", "Types: deb-src", 1).strip() for s in stanzas) + "\n"


def tests(src: Path) -> list[str]:
    """The numbered tests (0000-0999, as ``make`` runs them), e.g. ``0001``."""
    numbers = {m.group(1) for m in _TEST_DECL.finditer((src / "tests" / "test.c").read_text())}
    return sorted(n for n in numbers if n < "1000")


def run_one(src: Path, number: str, target: Target, mode: str, log: Path) -> dict[str, Outcome]:
    """Run test ``number`` (all its entries, e.g. 0022 and 0022 local) against ``target``;
    output appended to ``log``."""
    tests_dir = src / "tests"
    bootstrap = target.bootstrap
    settings = [f"metadata.broker.list={bootstrap}"]
    if (secured := target.secured) is not None:
        bootstrap = secured.plaintext
        settings.append(f"security.protocol={target.security_protocol}")
        if target.security_protocol == "SSL":
            settings += [
                f"ssl.ca.location={secured.ca}",
                f"ssl.certificate.location={secured.client_cert}",
                f"ssl.key.location={secured.client_key}",
            ]
        else:
            settings += [
                f"sasl.mechanisms={SCRAM_MECHANISM}",
                f"sasl.username={secured.scram_user}",
                f"sasl.password={secured.scram_password}",
            ]
    with tempfile.TemporaryDirectory(prefix="rdk-") as tmp:
        conf = Path(tmp) / "test.conf"
        conf.write_text("\n".join(settings) + "\n")
        report = Path(tmp) / "report.json"
        env = {
            **os.environ,
            "TESTS": number,
            "TEST_KAFKA_VERSION": KAFKA_VERSION,
            "RDKAFKA_TEST_CONF": str(conf),
            "TEST_REPORT": str(report),
            "KAFKA_PATH": str(kafka_path()),
            "BROKERS": bootstrap,
            "LD_LIBRARY_PATH": f"{src / 'src'}:{src / 'src-cpp'}",
        }
        argv = ["nice", "-n", "10", "./test-runner", "-E"] + (["-Q"] if mode == "quick" else [])
        start = time.monotonic()
        try:
            proc = subprocess.run(
                argv,
                cwd=tests_dir,
                env=env,
                capture_output=True,
                text=True,
                timeout=TEST_TIMEOUT_S,
                errors="replace",
            )
            output, timed_out = proc.stdout + proc.stderr, False
        except subprocess.TimeoutExpired as e:
            output = (
                (e.stdout or b"").decode(errors="replace")
                if isinstance(e.stdout, bytes)
                else (e.stdout or "")
            )
            timed_out = True
        seconds = time.monotonic() - start
        with log.open("a") as out:
            out.write(f"\n===== {number}\n{output}")
        return _outcomes(number, report, output, seconds, timed_out)


def _outcomes(
    number: str, report: Path, output: str, seconds: float, timed_out: bool
) -> dict[str, Outcome]:
    try:
        ran = json.loads(report.read_text())["tests"]
    except (OSError, ValueError, KeyError):
        ran = None
    if ran is None:
        # No report: the runner was killed (its watchdog, a crash, or our bound).
        why = "killed at the time bound" if timed_out else _failure(output) or "the runner died"
        return {
            number: Outcome("timeout" if timed_out or "timed out" in why else "fail", seconds, why)
        }
    out: dict[str, Outcome] = {}
    for name, entry in ran.items():
        if not name.startswith(number):
            continue
        state = entry["state"]
        status = {"PASSED": "pass", "SKIPPED": "skip", "FAILED": "fail"}.get(state, "fail")
        detail = entry.get("extra", "") if status != "pass" else ""
        if status == "fail":
            detail = _failure(output) or detail
        out[name] = Outcome(status, float(entry.get("duration", 0.0)), detail[:200])
    return out or {
        number: Outcome("fail", seconds, _failure(output) or "not in the runner's report")
    }


def _failure(output: str) -> str:
    """The runner's first failure line, without colour codes."""
    clean = re.sub(r"\x1b\[[0-9;]*m|\x1b\(B", "", output)
    # The framework prints '### Test "<name>" failed at <where>: ###' then the message.
    if match := re.search(r'### Test "(?!<MAIN>)[^"]+" failed at ([^\n]*?): ###\n([^\n]+)', clean):
        return f"{match.group(2).strip()} ({match.group(1).split(' at ')[0]})"[:200]
    for line in clean.splitlines():
        if "### Test" in line and "failed" in line.lower() or "TEST FAILURE" in line:
            continue
        if re.search(r"FAIL|failed|timed out", line) and "PASSED" not in line:
            return re.sub(r"^\[[^\]]*\]\s*", "", line).strip()[:200]
    return ""
