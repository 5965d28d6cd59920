"""Segment logs in Kafka's on-disk format. Synchronous; no trio, no sockets."""
