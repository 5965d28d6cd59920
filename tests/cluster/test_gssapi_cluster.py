"""A ZooKeeper cluster whose brokers log in to each other with GSSAPI (Kerberos), Kafka's
default inter-broker mechanism, against a real MIT KDC (tests/wirebroker/kdc.py).

Two brokers on `localhost`, each with the keytab of `kafka/localhost` in its listener's
`Krb5LoginModule` JAAS entry: the controller's requests, the follower's fetches and
AlterPartition go over the SASL_PLAINTEXT inter-broker listener, so acks=all with
min.insync.replicas=2 is answered only once the follower, logged in with Kerberos, fetched.
The ACL authorizer is on with `User:kafka` (the brokers' principal by the DEFAULT rule) the
only super user: the inter-broker requests pass only as that user.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.cluster.harness import eventually, replicated, start_broker
from tests.wirebroker.kdc import REALM, Kdc, kcat_gssapi, krb5_jaas, requires_kdc, serving_kdc

pytestmark = [pytest.mark.integration, requires_kdc]


@pytest.fixture
def kdc(tmp_path: Path) -> Iterator[Kdc]:
    (tmp_path / "kdc").mkdir()
    with serving_kdc(tmp_path / "kdc") as kdc:  # the brokers run in this process
        yield kdc


def test_replication_between_brokers_logged_in_with_kerberos(
    zk_connect: str, tmp_path: Path, kdc: Kdc
) -> None:
    keytab = kdc.keytab("kafka/localhost")
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://localhost:0",
        "inter_broker_listener_name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "GSSAPI",
        "sasl.mechanism.inter.broker.protocol": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": krb5_jaas(
            keytab, f"kafka/localhost@{REALM}"
        ),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:kafka",
        "allow.everyone.if.no.acl.found": "false",
        "min_insync_replicas": "2",
        "default_replication_factor": "2",  # the topic is created by kcat's Metadata request
    }

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, **props)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **props)
            await eventually(lambda: b1.broker.controller_id > 0, what="a controller")
            await eventually(
                lambda: len(list(b1.broker.metadata_cache.alive_brokers())) == 2,
                what="both brokers alive",
            )
            sasl = next(lst.port for lst in b1.listeners if lst.name == "SASL_PLAINTEXT")
            # kcat as the brokers' principal (a super user: it may create the topic), acks=all
            values = [f"kerberized-{i}".encode() for i in range(5)]
            produced = await trio.to_thread.run_sync(
                lambda: subprocess.run(
                    [
                        *kcat_gssapi(f"localhost:{sasl}", f"kafka/localhost@{REALM}", keytab),
                        *("-X", "acks=all", "-t", "kerberized", "-p", "0", "-P"),
                    ],
                    input=b"\n".join(values) + b"\n",
                    capture_output=True,
                    timeout=60,
                )
            )
            assert produced.returncode == 0, produced.stderr
            await replicated([b1, b2], "kerberized", 5)
            nursery.cancel_scope.cancel()

    trio.run(main)
