"""Produce, v0-v11.

acks 0, 1 and -1; acks=0 gets no response at all, and a failed acks=0 produce closes the
connection, as Kafka does. Each partition is answered on its own:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, MESSAGE_TOO_LARGE (batch over the topic's
`max.message.bytes`), CORRUPT_MESSAGE (CRC or framing), INVALID_RECORD, INVALID_TIMESTAMP,
KAFKA_STORAGE_ERROR. A partition whose append succeeded is always answered with its offset,
even if another partition in the same request failed (an unexpected error is confined to the
partition it hit). v3+ must carry exactly one v2 batch.
Idempotent batches (see :mod:`storage.producer_state`): a retry of one of the producer's last
five batches is answered with its original base offset and no error, and not written again;
a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH.
Differences from Kafka: transactional produce is accepted but no transaction state is kept yet.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.produce import ProduceRequest, ProduceResponse
from wirebroker.broker import now_ms
from wirebroker.dispatch import CloseConnection, RequestContext, handles

log = logging.getLogger(__name__)

PartitionResponse = ProduceResponse.PartitionProduceResponse


@handles(ProduceRequest, (0, 11))
async def produce(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    acks_valid = request.acks in (0, 1, -1)
    topics = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            result = PartitionResponse(index=data.index, base_offset=-1)
            partitions.append(result)
            if not acks_valid:
                result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            _append(ctx, topic.name, data, result)
        topics.append(
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
        )
    if request.acks == 0:
        failed = [
            f"{t.name}-{p.index}: {ErrorCode(p.error_code).name}"
            for t in topics
            for p in t.partition_responses
            if p.error_code
        ]
        if failed:
            # Kafka closes the connection so that an acks=0 producer learns of the failure.
            raise CloseConnection(f"acks=0 produce failed for {', '.join(failed)}")
        return None
    return ProduceResponse(responses=topics)


def _append(
    ctx: RequestContext,
    topic: str,
    data: ProduceRequest.PartitionProduceData,
    result: PartitionResponse,
) -> None:
    broker = ctx.broker
    partition = broker.partition(topic, data.index)
    if partition is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return
    if not partition.is_leader(broker.node_id):
        result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return
    records = data.records
    if records is None or len(records) == 0:
        result.error_code = ErrorCode.INVALID_RECORD
        result.error_message = "the produce request carries no records"
        return
    try:
        info = partition.append_to_leader(records, now_ms())
    except KafkaError as e:
        result.error_code = e.error_code
        result.error_message = str(e)
        return
    except OSError as e:
        log.error("append to %s-%d failed: %s", topic, data.index, e)
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        result.error_message = str(e)
        return
    except Exception:
        # A bug: only this partition's fate is unknown; the others keep their real answers.
        log.exception("append to %s-%d failed unexpectedly", topic, data.index)
        result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
        return
    result.base_offset = info.first_offset
    result.log_append_time_ms = info.log_append_time
    result.log_start_offset = partition.log_start_offset
