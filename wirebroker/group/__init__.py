"""The classic group coordinator: a pure state machine (`state`), the records of
`__consumer_offsets` (`records`), their replay into groups (`loader`) and the trio task that
owns the groups (`coordinator`), writing through `wirebroker.coordinator_store`."""
