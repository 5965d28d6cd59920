"""Client quotas and replication throttles (Kafka's quota managers).

`entities` (quota entities and their configs, as ZooKeeper keeps them), `rates` (sampled
windows and the token bucket), `client` (the client quota managers), `throttle` (a request's
throttle time), `store` (the embedded broker's quota configs), `replication` (leader and
follower replication throttles). docs/broker.md, "Quotas", has the design.
"""
