"""The classic group coordinator: a pure state machine (`state`), the records of
`__consumer_offsets` (`records`), their replay into groups (`loader`), the trio side that owns
the groups and their offsets (`metadata_manager`, with `txn_offsets` for those of open
transactions) and the one that runs their membership (`coordinator`), writing through
`wirebroker.coordinator_store`."""
