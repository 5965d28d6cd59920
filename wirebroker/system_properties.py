"""The JVM system properties a Kafka deployment sets, read without a JVM.

Kafka reads some settings only as system properties (`-Dname=value` on the JVM's command line,
which kafka-server-start.sh takes from `KAFKA_OPTS`): OAUTHBEARER's allowed URLs, the JAAS file
(`java.security.auth.login.config`) and the ZooKeeper client's SASL switches. wirebroker reads
each from an environment variable of that very name or, without one, from the last
`-Dname=value` word of `KAFKA_OPTS`, so a deployment's `KAFKA_OPTS` works unchanged. Neither can
be changed by a client, as a system property cannot.
"""

from __future__ import annotations

import os


def system_property(name: str) -> str | None:
    """The value of system property `name`, or None when it is not set."""
    value = os.environ.get(name)
    if value is None:
        flag = f"-D{name}="
        for word in os.environ.get("KAFKA_OPTS", "").split():
            if word.startswith(flag):
                value = word[len(flag) :]
    return value
