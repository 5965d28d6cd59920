"""wirebroker's sans-IO Kafka codec: bytes in, objects out. No sockets, no trio, no files."""
