"""The cluster controller of ZooKeeper mode: pure decisions (`decisions`), the connections to the
brokers (`channel`), and the controller task that applies decisions (`controller`)."""
