"""One module per API family, each imported on its API's first request.

`HANDLED` is every API the broker handles: the module of this package that handles it and the
versions it implements (a whole range within Kafka 3.9's). ApiVersions answers from it, so the
modules, and the generated message modules they import, load only when their API is first asked
for (start-up time, bench row 7: a broker that never sees a group or an ACL request never
imports their handlers). Each handler names its versions in `@handles` too, beside the code that
implements them; `wirebroker.dispatch.handles` refuses a registration that differs from the
table, and `tests/wirebroker/test_handled_table.py` imports every module, so the two cannot
drift apart.
"""

#: API name -> (handler module in this package, lowest version, highest version), by API key.
HANDLED: dict[str, tuple[str, int, int]] = {
    "Produce": ("produce", 0, 11),
    "Fetch": ("fetch", 0, 17),
    "ListOffsets": ("list_offsets", 0, 9),
    "Metadata": ("metadata", 0, 12),
    "LeaderAndIsr": ("control", 0, 7),
    "StopReplica": ("control", 0, 4),
    "UpdateMetadata": ("control", 0, 8),
    "ControlledShutdown": ("controller", 0, 3),
    "OffsetCommit": ("offsets", 0, 9),
    "OffsetFetch": ("offsets", 0, 9),
    "FindCoordinator": ("groups", 0, 6),
    "JoinGroup": ("groups", 0, 9),
    "Heartbeat": ("groups", 0, 4),
    "LeaveGroup": ("groups", 0, 5),
    "SyncGroup": ("groups", 0, 5),
    "DescribeGroups": ("groups", 0, 5),
    "ListGroups": ("groups", 0, 5),
    "SaslHandshake": ("sasl", 0, 1),
    "ApiVersions": ("api_versions", 0, 4),
    "CreateTopics": ("topics", 0, 7),
    "DeleteTopics": ("topics", 0, 6),
    "DeleteRecords": ("partitions_admin", 0, 2),
    "InitProducerId": ("producer_ids", 0, 5),
    "OffsetForLeaderEpoch": ("partitions_admin", 0, 4),
    "AddPartitionsToTxn": ("txn", 0, 5),
    "AddOffsetsToTxn": ("txn", 0, 4),
    "EndTxn": ("txn", 0, 4),
    "WriteTxnMarkers": ("write_txn_markers", 0, 1),
    "TxnOffsetCommit": ("txn", 0, 4),
    "DescribeAcls": ("acls", 0, 3),
    "CreateAcls": ("acls", 0, 3),
    "DeleteAcls": ("acls", 0, 3),
    "CreateDelegationToken": ("delegation_tokens", 0, 3),
    "RenewDelegationToken": ("delegation_tokens", 0, 2),
    "ExpireDelegationToken": ("delegation_tokens", 0, 2),
    "DescribeDelegationToken": ("delegation_tokens", 0, 3),
    "DescribeConfigs": ("configs", 0, 4),
    "AlterConfigs": ("configs", 0, 2),
    "AlterReplicaLogDirs": ("partitions_admin", 0, 2),
    "DescribeLogDirs": ("partitions_admin", 0, 4),
    "SaslAuthenticate": ("sasl", 0, 2),
    "CreatePartitions": ("topics", 0, 3),
    "DeleteGroups": ("groups", 0, 2),
    "ElectLeaders": ("controller", 0, 2),
    "IncrementalAlterConfigs": ("configs", 0, 1),
    "AlterPartitionReassignments": ("controller", 0, 0),
    "ListPartitionReassignments": ("controller", 0, 0),
    "OffsetDelete": ("offsets", 0, 0),
    "DescribeClientQuotas": ("client_quotas", 0, 1),
    "AlterClientQuotas": ("client_quotas", 0, 1),
    "DescribeUserScramCredentials": ("sasl", 0, 0),
    "AlterUserScramCredentials": ("sasl", 0, 0),
    "AlterPartition": ("controller", 0, 3),
    "UpdateFeatures": ("features", 0, 1),
    "DescribeCluster": ("cluster", 0, 1),
    "DescribeProducers": ("producer_ids", 0, 0),
    "DescribeTransactions": ("txn", 0, 0),
    "ListTransactions": ("txn", 0, 1),
}
