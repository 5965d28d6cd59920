"""One module per API family; importing this package registers them all with the dispatcher."""

from wirebroker.handlers import (  # noqa: F401
    acls,
    api_versions,
    client_quotas,
    cluster,
    configs,
    control,
    controller,
    fetch,
    groups,
    list_offsets,
    metadata,
    offsets,
    partitions_admin,
    produce,
    producer_ids,
    sasl,
    topics,
    txn,
    write_txn_markers,
)
