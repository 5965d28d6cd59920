"""The brokers every suite runs against, each started fresh for one suite's run.

``kafka``: Apache Kafka 3.9, one broker (``compat.kafka_process.kafka_reference``: a container of
the local image when Docker works, else the jars). ``wirebroker``: one broker process.
``kafka-cluster``: ZooKeeper and three Kafka 3.9 brokers from the jars, the reference of
``wirebroker-cluster``: ``wirebroker cluster --brokers 3`` (ZooKeeper from the jars). The same
broker settings go to all; the clusters keep Kafka's replication defaults (3 replicas, offsets
and transaction logs included). ``replication_factor`` is what tests should create topics with.

A suite may ask for more listeners than PLAINTEXT on the plaintext targets (``start``'s
``listeners``): each broker gets them on ports of its own, and ``Target.listeners`` has each one's
bootstrap addresses; clients still bootstrap from PLAINTEXT.

``kafka-secured`` (from the jars: a container sets its own listeners) and ``wirebroker-secured``:
one broker each, secured as Kafka users secure one, with the same keys (``secured_settings``):
clients bootstrap from an SSL listener that requires their certificate, and a SASL_PLAINTEXT
listener takes SCRAM-SHA-256 logins (a user made by AlterUserScramCredentials once the broker
is up) and OAUTHBEARER's unsecured tokens (Kafka's default validator). ``Target.secured`` says
what a client needs; a suite that knows how runs itself over TLS and its login tests on them.
Between these brokers: PLAINTEXT, which the suites' admin tools use too.

``kafka-secured-cluster`` and ``wirebroker-secured-cluster``: ZooKeeper (from the jars) and
three brokers of each kind, secured as those and with the clusters' replication defaults, whose
inter-broker listener is SASL_SSL with SCRAM-SHA-512: the brokers log in to each other as
``BROKER_USER``, whom Kafka's ``kafka-configs.sh --zookeeper`` writes to ZooKeeper before they
start, as Kafka users bootstrap a cluster's SCRAM (wirebroker reads the same znodes).

``kafka-sasl`` and ``wirebroker-sasl`` are the same secured brokers with clients bootstrapping
from the SASL_PLAINTEXT listener instead, as the SCRAM user: for a suite that can log every
client in (``Target.security_protocol``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from compat.kafka_process import (
    free_port,
    kafka_broker,
    kafka_reference,
    run_kafka_tool,
    zookeeper,
)
from compat.suites.results import BUILD, TARGETS
from tests.broker_process import BrokerProcess
from tests.wirebroker.pki import STORE_PASSWORD, make_pki

#: ``wirebroker cluster``'s bootstrap line of each listener (the first one's without its name).
_BOOTSTRAP = re.compile(r"^cluster  \| (?:(?P<name>\w+): )?bootstrap\.servers=(?P<servers>\S+)")
#: A traceback's first line in a broker's log (``wirebroker cluster`` prefixes each broker's).
_TRACEBACK = re.compile(r"^(?:broker-\d+ \| )?Traceback", re.M)
CLUSTER_START_TIMEOUT = 120.0
LOGS = BUILD / "logs"


#: The targets ``_secured`` starts.
SECURED = tuple(t for t in TARGETS if t.partition("-")[2] in ("secured", "secured-cluster", "sasl"))
#: The SCRAM mechanism and user of the secured targets.
SCRAM_MECHANISM = "SCRAM-SHA-256"
SCRAM_USER, SCRAM_PASSWORD = "kgo", "kgo-secret-5d21"
#: The brokers' own SCRAM-SHA-512 user of the secured clusters, between them over SASL_SSL.
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret-8e3a"
#: How long a secured broker may take to accept its SCRAM user (Kafka applies it when
#: ZooKeeper notifies it).
SCRAM_READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Secured:
    """What a client of a secured target needs: TLS files, and the SASL listener's logins."""

    ca: Path  # PEM, the CA of the broker's and the client's certificates
    client_cert: Path  # PEM
    client_key: Path  # PEM, unencrypted
    sasl_bootstrap: str  # SASL_PLAINTEXT: SCRAM-SHA-256 and OAUTHBEARER (unsecured tokens)
    scram_user: str
    scram_password: str
    plaintext: str  # the PLAINTEXT listeners, for a suite's admin tools


@dataclass(frozen=True)
class Target:
    name: str
    bootstrap: str  # the secured targets': their SSL listeners; the SASL ones': SASL_PLAINTEXT
    replication_factor: int
    how: str
    secured: Secured | None = None
    security_protocol: str = "PLAINTEXT"  # how clients of ``bootstrap`` connect
    #: listener name -> its bootstrap addresses (every broker's), of the listeners ``start`` was
    #: asked for (none on the secured targets)
    listeners: Mapping[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def start(
    name: str,
    settings: Mapping[str, str],
    system_properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
) -> Iterator[Target]:
    """Run target ``name`` with broker ``settings`` until the block exits.

    On the plaintext targets (one broker, clusters) a suite may ask for more ``listeners``
    (PLAINTEXT first: its clients bootstrap from it, and brokers reach each other on it; Kafka's
    one broker then runs from the jars, as a container sets its own), whose other keys (TLS,
    SASL) are in ``settings``, and JVM ``system_properties`` (e.g. a JAAS file's
    ``java.security.auth.login.config``), which Kafka's JVM takes as ``-D`` options and
    wirebroker reads from ``KAFKA_OPTS``, as a deployment gives them to either."""
    jvm_options = [f"-D{key}={value}" for key, value in (system_properties or {}).items()]
    if (jvm_options or tuple(listeners) != ("PLAINTEXT",)) and name in SECURED:
        raise ValueError(f"{name} has its own listeners and system properties")
    if listeners[0] != "PLAINTEXT":
        raise ValueError(f"listeners {listeners}: PLAINTEXT comes first")
    env = {"KAFKA_OPTS": " ".join(jvm_options)} if jvm_options else None
    if name == "kafka" and (len(listeners) > 1 or jvm_options):
        ports = {n: free_port() for n in listeners}
        with (
            zookeeper() as zk,
            kafka_broker(
                zk.connect,
                port=ports["PLAINTEXT"],
                overrides={**settings, **listener_settings(ports)},
                jvm_options=jvm_options,
            ),
        ):
            found = {n: _seeds([ports], n) for n in listeners}
            yield _plaintext(name, found, 1, "Apache Kafka 3.9 from the jars")
    elif name == "kafka":
        with kafka_reference(overrides=settings) as kafka:
            found = {"PLAINTEXT": kafka.bootstrap_servers}
            yield _plaintext(name, found, 1, f"Apache Kafka 3.9 {kafka.how}")
    elif name == "wirebroker":
        keys = dict(settings)
        if len(listeners) > 1:
            keys |= listener_settings({n: free_port() for n in listeners})
        with tempfile.TemporaryDirectory(prefix="wb-suite-") as data:
            broker = BrokerProcess(Path(data), keys, env=env)
            broker.start(timeout=60)
            try:
                found = {n: f"127.0.0.1:{p}" for n, p in broker.ports.items()}
                yield _plaintext(name, found, 1, "one `wirebroker serve` process")
            finally:
                _stop_and_check(broker, LOGS / f"{name}-broker.log")
    elif name == "kafka-cluster":
        with _kafka_cluster(settings, listeners, jvm_options) as found:
            yield _plaintext(name, found, 3, "ZooKeeper + 3 Apache Kafka 3.9 brokers from the jars")
    elif name == "wirebroker-cluster":
        with _cluster(settings, listeners, env) as found:
            how = "`wirebroker cluster --brokers 3` (ZooKeeper from the jars)"
            yield _plaintext(name, found, 3, how)
    elif name in SECURED:
        with _secured(name, settings) as target:
            yield target
    else:
        raise ValueError(f"unknown target {name}")


def _plaintext(name: str, listeners: Mapping[str, str], brokers: int, how: str) -> Target:
    """A plaintext target whose brokers have ``listeners`` (name -> bootstrap addresses), its
    clients bootstrapping from PLAINTEXT."""
    return Target(name, listeners["PLAINTEXT"], brokers, how, listeners=listeners)


def _seeds(ports: Sequence[Mapping[str, int]], listener: str) -> str:
    """The addresses of ``listener`` of brokers on 127.0.0.1 at ``ports`` (one dict each)."""
    return ",".join(f"127.0.0.1:{own[listener]}" for own in ports)


#: Kafka's own defaults for a cluster, over ``kafka_properties``' single-broker ones.
CLUSTER_REPLICATION = {
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}


@contextlib.contextmanager
def _kafka_cluster(
    settings: Mapping[str, str], listeners: Sequence[str], jvm_options: Sequence[str]
) -> Iterator[dict[str, str]]:
    """ZooKeeper and three Kafka brokers from the jars, each with ``listeners`` on ports of its
    own; each listener's bootstrap addresses."""
    ports = [{n: free_port() for n in listeners} for _ in (1, 2, 3)]
    with contextlib.ExitStack() as stack:
        zk = stack.enter_context(zookeeper())
        for broker_id, own in enumerate(ports, start=1):
            keys = {**CLUSTER_REPLICATION, **settings}
            if len(listeners) > 1:
                keys |= listener_settings(own)
            stack.enter_context(
                kafka_broker(
                    zk.connect,
                    broker_id=broker_id,
                    port=own["PLAINTEXT"],
                    overrides=keys,
                    jvm_options=jvm_options,
                )
            )
        yield {n: _seeds(ports, n) for n in listeners}


@contextlib.contextmanager
def _cluster(
    settings: Mapping[str, str], listeners: Sequence[str], env: Mapping[str, str] | None
) -> Iterator[dict[str, str]]:
    """``wirebroker cluster --brokers 3`` whose brokers have ``listeners`` on free ports (and
    ``env`` beside the launcher's); each listener's bootstrap addresses, as it prints them."""
    with tempfile.TemporaryDirectory(prefix="wb-suite-cluster-") as data:
        argv = [sys.executable, "-m", "wirebroker", "cluster", "--brokers", "3"]
        argv += ["--zookeeper-port", "0", "--data-dir", data, "--listeners"]
        argv += [",".join(f"{n}://127.0.0.1:0" for n in listeners)]
        keys = {"default.replication.factor": "3", **settings}
        if len(listeners) > 1:
            keys["inter.broker.listener.name"] = "PLAINTEXT"
        for key, value in keys.items():
            argv += ["--override", f"{key}={value}"]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        found: dict[str, str] = {}
        ready = threading.Event()
        log = LOGS / "wirebroker-cluster.log"
        log.parent.mkdir(parents=True, exist_ok=True)

        def pump() -> None:
            assert proc.stdout is not None
            with log.open("w") as out:
                for line in proc.stdout:
                    out.write(line)
                    match = _BOOTSTRAP.search(line)
                    if match and not ready.is_set():
                        found[match["name"] or listeners[0]] = match["servers"]
                        if len(found) == len(listeners):
                            ready.set()
            ready.set()

        pumped = threading.Thread(target=pump, daemon=True)
        pumped.start()
        try:
            if not ready.wait(CLUSTER_START_TIMEOUT) or len(found) < len(listeners):
                raise RuntimeError(f"wirebroker cluster did not start: see {log}")
            yield found
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            pumped.join(timeout=30)
        _check_tracebacks(log)


def listener_settings(ports: Mapping[str, int]) -> dict[str, str]:
    """Broker keys for listeners on 127.0.0.1 at ``ports`` (name -> port), PLAINTEXT between
    brokers."""
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    return {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "inter.broker.listener.name": "PLAINTEXT",
    }


def tls_settings(pki_dir: Path) -> dict[str, str]:
    """Broker keys for TLS listeners that require a client certificate, with ``make_pki``'s keys
    in ``pki_dir``."""
    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki_dir / "server.p12"),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki_dir / "ca.pem"),
        "ssl.client.auth": "required",
    }


def secured_settings(pki_dir: Path, ports: Mapping[str, int]) -> dict[str, str]:
    """Broker keys of a secured target, the same for Kafka and wirebroker: SSL with client
    certificates required, SASL_PLAINTEXT with SCRAM-SHA-256 and OAUTHBEARER; between brokers
    PLAINTEXT, or SASL_SSL with SCRAM-SHA-512 as ``BROKER_USER`` when ``ports`` has a SASL_SSL
    listener (a secured cluster)."""
    keys = {
        **listener_settings(ports),
        **tls_settings(pki_dir),
        "sasl.enabled.mechanisms": f"{SCRAM_MECHANISM},OAUTHBEARER",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
    }
    if "SASL_SSL" in ports:
        keys |= {
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{BROKER_USER}" password="{BROKER_PASSWORD}";'
            ),
        }
    return keys


@contextlib.contextmanager
def _secured(name: str, settings: Mapping[str, str]) -> Iterator[Target]:
    """One secured broker, or (``*-secured-cluster``) three, with ZooKeeper; the wirebroker
    brokers' logs go to ``LOGS``."""
    cluster = name.endswith("-cluster")
    listener_names = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT"] + (["SASL_SSL"] if cluster else [])
    with tempfile.TemporaryDirectory(prefix="wb-suite-secured-") as tmp:
        work = Path(tmp)
        pki = make_pki(work)
        ports = {
            i: {n: free_port() for n in listener_names} for i in ((1, 2, 3) if cluster else (0,))
        }

        def seeds(listener: str) -> str:
            return _seeds(list(ports.values()), listener)

        secured = Secured(
            pki.ca,
            pki.client_cert,
            pki.client_key,
            seeds("SASL_PLAINTEXT"),
            SCRAM_USER,
            SCRAM_PASSWORD,
            seeds("PLAINTEXT"),
        )
        common = {**CLUSTER_REPLICATION, **settings} if cluster else settings
        with contextlib.ExitStack() as stack:
            zk_connect = ""
            if cluster or name.startswith("kafka"):
                zk_connect = stack.enter_context(zookeeper()).connect
            if cluster:
                _add_broker_user(zk_connect)
            for broker_id, own in ports.items():
                keys = {**common, **secured_settings(work, own)}
                if name.startswith("kafka"):
                    stack.enter_context(
                        kafka_broker(
                            zk_connect, broker_id=broker_id, port=own["PLAINTEXT"], overrides=keys
                        )
                    )
                    continue
                if cluster:
                    keys |= {"broker.id": str(broker_id), "zookeeper.connect": zk_connect}
                broker = BrokerProcess(work / f"data-{broker_id}", keys)
                broker.start(timeout=60)
                stack.callback(_stop_and_check, broker, LOGS / f"{name}-broker-{broker_id}.log")
            how = {
                "kafka-secured": "Apache Kafka 3.9 from the jars, secured",
                "wirebroker-secured": "one `wirebroker serve` process, secured",
                "kafka-sasl": "Apache Kafka 3.9 from the jars, secured, clients over "
                f"SASL_PLAINTEXT with {SCRAM_MECHANISM}",
                "wirebroker-sasl": "one `wirebroker serve` process, secured, clients over "
                f"SASL_PLAINTEXT with {SCRAM_MECHANISM}",
                "kafka-secured-cluster": "ZooKeeper + 3 Apache Kafka 3.9 brokers from the jars, "
                "secured, SASL_SSL between them",
                "wirebroker-secured-cluster": "ZooKeeper (from the jars) + 3 `wirebroker serve` "
                "processes, secured, SASL_SSL between them",
            }[name]
            add_scram_user(
                secured.plaintext,
                secured.sasl_bootstrap,
                secured.scram_user,
                secured.scram_password,
            )
            protocol = "SASL_PLAINTEXT" if name.endswith("-sasl") else "SSL"
            yield Target(name, seeds(protocol), len(ports), how, secured, protocol)


def _stop_and_check(broker: BrokerProcess, log: Path) -> None:
    """Stop ``broker`` and write what it logged (kept in memory) to ``log``; then fail the run if
    it logged a traceback (``_check_tracebacks``)."""
    broker.stop()
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\n".join(broker.log) + "\n")
    _check_tracebacks(log)


def _check_tracebacks(log: Path) -> None:
    """A traceback in a wirebroker's log is a bug it caught (a request answered with
    UNKNOWN_SERVER_ERROR, a task that died): the suite's run fails, whatever its tests said."""
    count = len(_TRACEBACK.findall(log.read_text()))
    if count:
        raise RuntimeError(f"wirebroker logged {count} traceback(s) during the suite: see {log}")


def _add_broker_user(zk_connect: str) -> None:
    """The brokers' own SCRAM-SHA-512 user, in ZooKeeper before any broker starts, with Kafka's
    ``kafka-configs.sh --zookeeper`` (ConfigCommand from the jars), as Kafka users make it."""
    run_kafka_tool(
        "kafka.admin.ConfigCommand",
        ["--zookeeper", zk_connect, "--alter", "--entity-type", "users"]
        + ["--entity-name", BROKER_USER]
        + ["--add-config", f"SCRAM-SHA-512=[password={BROKER_PASSWORD}]"],
    )


def add_scram_user(
    plaintext: str,
    sasl_bootstrap: str,
    user: str,
    password: str,
    mechanisms: Sequence[str] = (SCRAM_MECHANISM,),
) -> None:
    """Make SCRAM user ``user`` (one credential per mechanism) through the PLAINTEXT listeners
    ``plaintext``; wait until each broker's SASL_PLAINTEXT listener of ``sasl_bootstrap`` takes
    it with each mechanism."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    upsertions = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096),
            password.encode(),
        )
        for mechanism in mechanisms
    ]
    admin = AdminClient({"bootstrap.servers": plaintext})
    admin.alter_user_scram_credentials(upsertions)[user].result(30)
    deadline = time.monotonic() + SCRAM_READY_TIMEOUT
    for seed in sasl_bootstrap.split(","):
        for mechanism in mechanisms:
            login: dict[str, str | int | float | bool] = {
                "bootstrap.servers": seed,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": password,
                "log_level": 0,  # the failed logins while the user propagates are expected
            }
            while True:
                try:
                    AdminClient(login).list_topics(timeout=5)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the SCRAM user did not log in with {mechanism} on {seed} within "
                            f"{SCRAM_READY_TIMEOUT:.0f} s"
                        ) from None
                    # Kafka takes the user when ZooKeeper notifies it: nothing to await
                    time.sleep(0.2)
