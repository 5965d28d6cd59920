"""The ISR follows the followers: a paused follower drops out and comes back."""

from __future__ import annotations

import pytest

from tests.cluster.processes import running_cluster
from tests.cluster.workload import ConfluentProducer

pytestmark = pytest.mark.integration


def test_paused_follower_leaves_and_rejoins_the_isr(kind: str) -> None:
    with running_cluster(kind) as cluster:
        topic = "isr"
        cluster.create_topic(topic, 1)
        with ConfluentProducer(cluster.bootstrap, topic, 1, rate=200):
            state = cluster.partitions(topic)[0]
            follower = next(r for r in state.replicas if r != state.leader)
            cluster.pause(follower)
            try:
                cluster.wait_isr(topic, 0, set(state.replicas) - {follower}, timeout=30)
            finally:
                cluster.resume(follower)
            cluster.wait_isr(topic, 0, set(state.replicas), timeout=30)
