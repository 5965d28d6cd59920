"""ZooKeeper: the znodes of a Kafka cluster (`znodes`), a trio-friendly client (`client`), and the
broker's own part of the cluster (`member`: registration, config changes, topic admin)."""
