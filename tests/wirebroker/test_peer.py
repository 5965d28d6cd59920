"""`PeerConnection` against a real broker: an answer larger than the connection's first
receive buffer, arriving over several reads straight into its frame buffer, comes out whole,
and the next request on the connection is answered in step (the replica fetchers' path)."""

from __future__ import annotations

import os

import trio

from protocol.errors import ErrorCode
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    decode_records,
    fetch_request,
    host_port,
    produce_request,
)
from wirebroker.peer import RECEIVE_SIZE, PeerConnection


def test_answers_larger_than_the_receive_buffer_arrive_whole(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    values = [os.urandom(100_000) for _ in range(4)]  # 400 KB: past RECEIVE_SIZE too
    assert sum(map(len, values)) > RECEIVE_SIZE
    with RawClient(broker.bootstrap) as client:
        for value in values:
            response = client.request(produce_request(topic, 0, [SimpleRecord(None, value)]), 9)
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE

    async def main() -> None:
        host, port = host_port(broker.bootstrap)
        async with await PeerConnection.open(host, port, client_id="peer-test") as connection:
            for offset in (0, 2, 0):
                response = await connection.request(fetch_request(topic, offset=offset), 12)
                records = response.responses[0].partitions[0].records
                assert [v for _, _, v in decode_records(records)] == values[offset:]

    trio.run(main)
