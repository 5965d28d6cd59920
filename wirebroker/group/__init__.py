"""The classic group coordinator: a pure state machine (`state`), the records of
`__consumer_offsets` (`records`) and the trio task that owns both (`coordinator`)."""
