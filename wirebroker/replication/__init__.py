"""The replica side of a cluster: leaders, followers, fetchers and ISR changes (see docs/cluster.md)."""
