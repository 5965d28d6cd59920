"""Client quotas and replication throttles (Kafka's quota managers).

`entities` (quota entities and their configs, as ZooKeeper keeps them), `rates` (sampled
windows and the token bucket), `client` (the client quota managers), `throttle` (a request's
throttle time), `store` (the embedded broker's quota configs), `replication` (leader and
follower replication throttles). An ip entity's `connection_creation_rate` is kept with the
client quotas and applied by `wirebroker.connection_limits`. docs/broker.md, "Quotas", has the
design.
"""
