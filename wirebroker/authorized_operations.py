"""The authorized-operations bit fields Kafka reports when no authorizer is configured.

With no authorizer every operation a resource type supports is allowed, and Kafka reports them
as a 32-bit field with bit N set for AclOperation code N.
"""

from __future__ import annotations

# AclOperation codes (org.apache.kafka.common.acl.AclOperation)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14

#: Kafka's "not requested" value for authorized_operations fields.
NOT_REQUESTED = -(2**31)


def _bits(*ops: int) -> int:
    value = 0
    for op in ops:
        value |= 1 << op
    return value


TOPIC = _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
GROUP = _bits(READ, DELETE, DESCRIBE)
CLUSTER = _bits(
    CREATE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALTER,
    DESCRIBE,
    CREATE_TOKENS,
    DESCRIBE_TOKENS,
)
