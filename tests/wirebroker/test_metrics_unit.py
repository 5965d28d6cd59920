"""Two brokers in one process each serve their own /metrics (`wirebroker.metrics_http` gives
every broker its own registry, never prometheus_client's global one); a broker without the
endpoint counts nothing."""

from __future__ import annotations

from pathlib import Path

import trio

from protocol.messages.headers import RequestHeader
from protocol.record_batch import SimpleRecord
from tests.wirebroker.helpers import produce_request, scrape, value
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.dispatch import RequestContext, dispatch
from wirebroker.metrics_http import serve_metrics


def test_brokers_in_one_process_do_not_mix(tmp_path: Path) -> None:
    async def main() -> None:
        brokers = [
            Broker.open(
                BrokerConfig.from_properties(
                    {"log.dirs": str(tmp_path / name), "wirebroker.metrics.listener": "127.0.0.1:0"}
                )
            )
            for name in ("a", "b")
        ]
        try:
            async with trio.open_nursery() as nursery:
                urls = [await nursery.start(serve_metrics, b) for b in brokers]
                brokers[0].create_topic("only-a", 1, 1, {})
                brokers[0].stats.produced("only-a", 3, 300)
                a, b = [await trio.to_thread.run_sync(scrape, url) for url in urls]
                nursery.cancel_scope.cancel()
        finally:
            for broker in brokers:
                broker.close()
        messages_in = "kafka_server_brokertopicmetrics_messagesin_total"
        assert value(a, messages_in, topic="only-a") == 3
        assert value(b, messages_in) == 0
        assert (messages_in, frozenset({("topic", "only-a")})) not in b
        assert value(a, "kafka_server_replicamanager_partitioncount") == 1
        assert value(b, "kafka_server_replicamanager_partitioncount") == 0

    trio.run(main)


def test_nothing_is_counted_without_the_endpoint(tmp_path: Path) -> None:
    async def produce(metrics: dict[str, str], name: str) -> Broker:
        broker = Broker.open(
            BrokerConfig.from_properties({"log.dirs": str(tmp_path / name), **metrics})
        )
        broker.create_topic("t", 1, 1, {})
        header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1)
        ctx = RequestContext(broker, header, "127.0.0.1", "PLAINTEXT")
        await dispatch(ctx, produce_request("t", 0, [SimpleRecord(None, b"v")], acks=1))
        broker.close()
        return broker

    off = trio.run(produce, {}, "off")
    assert not off.stats.on
    assert sum(off.stats.requests[0].versions) == 0
    assert not off.stats.topics
    on = trio.run(produce, {"wirebroker.metrics.listener": "127.0.0.1:0"}, "on")
    assert on.stats.on
    assert on.stats.requests[0].versions[9] == 1
    assert on.stats.topics["t"].messages_in == 1
