"""A broker secured as Kafka users secure one: SASL/PLAIN users, the ACL authorizer, a super user.

Shared by the ACL tests (embedded and cluster): the broker keys (`secured_properties`), the
clients' logins (raw, confluent-kafka, and the Java tools' `--command-config` files), and
Kafka's own `kafka-acls` (kafka.admin.AclCommand from the jars).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compat.clients import java
from protocol.errors import ErrorCode
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_acls import DeleteAclsRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient

ACL_COMMAND = "kafka.admin.AclCommand"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
#: Users and passwords of the SASL/PLAIN listener; `admin` is the super user.
PASSWORDS = {
    "admin": "admin-pw-5e1f0",
    "alice": "alice-pw-77c1a",
    "bob": "bob-pw-0b9d2",
}
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{user}="{password}"' for user, password in PASSWORDS.items())
    + ";"
)
#: Kafka's AclOperation / ResourceType / PatternType / AclPermissionType codes, for raw requests.
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALLOW, DENY = 3, 2
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def secured_properties(sasl_listener: str = "SASL_PLAINTEXT") -> dict[str, str]:
    """Broker keys: SASL/PLAIN with `PASSWORDS` on `sasl_listener`, ACLs, `admin` super user."""
    return {
        "sasl.enabled.mechanisms": "PLAIN",
        f"listener.name.{sasl_listener.lower()}.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
    }


def embedded_properties() -> dict[str, str]:
    """An embedded broker's keys: a PLAINTEXT listener beside the secured SASL_PLAINTEXT one,
    and groups that form at once on one offsets partition."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **secured_properties(),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    }


def sasl(broker: BrokerProcess) -> str:
    """The embedded broker's SASL_PLAINTEXT bootstrap."""
    return f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}"


def login(user: str) -> tuple[str, str]:
    return user, PASSWORDS[user]


def client_config(bootstrap: str, user: str) -> dict[str, Any]:
    """A confluent-kafka (librdkafka) config logging in as `user`."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def command_config(directory: Path, user: str) -> Path:
    """A Java client properties file (`--command-config`, `--producer.config`) for `user`."""
    path = directory / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{PASSWORDS[user]}";\n'
    )
    return path


def kafka_acls(bootstrap: str, config: Path, *args: str) -> str:
    """Run Kafka's kafka-acls against `bootstrap`; its output."""
    return java(
        ACL_COMMAND, "--bootstrap-server", bootstrap, "--command-config", str(config), *args
    )


def create_topics(bootstrap: str, *names: str, partitions: int = 1, replication: int = 1) -> None:
    """Create topics as the super user (and fail unless each was created)."""
    with RawClient(bootstrap, plain=login("admin")) as admin:
        answer = admin.request(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name=name, num_partitions=partitions, replication_factor=replication
                    )
                    for name in names
                ],
                timeout_ms=30_000,
            ),
            5,
        )
    for result in answer.topics:
        assert result.error_code == ErrorCode.NONE, (result.name, result.error_message)


def acl(
    resource_type: int,
    name: str,
    principal: str,
    operation: int,
    permission: int = ALLOW,
    pattern: int = LITERAL,
    host: str = "*",
) -> CreateAclsRequest.AclCreation:
    return CreateAclsRequest.AclCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def create_acls(admin: RawClient, creations: list[CreateAclsRequest.AclCreation]) -> None:
    """Create ACLs on an open connection (and fail unless each was created)."""
    answer = admin.request(CreateAclsRequest(creations=creations), 3)
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * len(creations), answer


def delete_acls(admin: RawClient, creations: list[CreateAclsRequest.AclCreation]) -> None:
    """Delete exactly these ACLs (one filter naming each binding)."""
    filters = [
        DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=c.resource_type,
            resource_name_filter=c.resource_name,
            pattern_type_filter=c.resource_pattern_type,
            principal_filter=c.principal,
            host_filter=c.host,
            operation=c.operation,
            permission_type=c.permission_type,
        )
        for c in creations
    ]
    answer = admin.request(DeleteAclsRequest(filters=filters), 3)
    assert all(r.error_code == ErrorCode.NONE for r in answer.filter_results), answer


def grant(bootstrap: str, *creations: CreateAclsRequest.AclCreation) -> None:
    """Create ACLs as the super user."""
    with RawClient(bootstrap, plain=login("admin")) as admin:
        create_acls(admin, list(creations))
