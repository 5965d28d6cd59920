"""ZooKeeper errors that code outside `wirebroker.zk` catches, importable without kazoo."""

from __future__ import annotations


class ZooKeeperUnreachable(ConnectionError):
    """No ZooKeeper answered within `zookeeper.connection.timeout.ms` at start-up; `wirebroker
    serve` reports it in one line and exits."""


class ZooKeeperAuthFailed(ZooKeeperUnreachable):
    """ZooKeeper refused this broker's SASL login at start-up (AUTH_FAILED); reported as an
    unreachable ZooKeeper is: no session, so no broker."""
