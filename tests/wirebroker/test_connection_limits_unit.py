"""Connection quotas (`wirebroker.connection_limits`) on trio's MockClock: Kafka's creation-rate
throttle times to the millisecond, the inter-broker listener's exemption, the per-IP quota's
refusal, limits changed while a connection waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from wirebroker import connection_limits
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.connection_limits import (
    ConnectionLimits,
    ConnectionThrottled,
    TooManyConnections,
    validate,
)
from wirebroker.quotas.client import ClientQuotas
from wirebroker.quotas.entities import DEFAULT, QuotaEntity

pytestmark = pytest.mark.timeout(30)

LISTENERS = "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0"


def limits_with(**values: str) -> ConnectionLimits:
    """Two listeners (PLAINTEXT the inter-broker one), `quota.window.num=2` windows of 1 s,
    the time read from trio's clock."""
    config = BrokerConfig(
        {
            "listeners": LISTENERS,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "log.dirs": "/nonexistent",
            "quota.window.num": "2",
            **{k.replace("_", "."): v for k, v in values.items()},
        }
    )
    return ConnectionLimits(config, ClientQuotas(config), lambda: int(trio.current_time() * 1000))


def run(main: Callable[[], Awaitable[None]]) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def admitted_at(limits: ConnectionLimits, listener: str, count: int) -> list[int]:
    """When (ms of virtual time) each of `count` connections in a row is admitted."""
    out = []
    for _ in range(count):
        await limits.admit(listener, "10.0.0.1")
        out.append(round(trio.current_time() * 1000))
    return out


def test_broker_rate_delays_accepts_by_kafkas_throttle_time() -> None:
    async def main() -> None:
        limits = limits_with(max_connection_creation_rate="2")
        # Two within the rate; the third makes it 3/s over at least one window (1 s):
        # (3 - 2) / 2 * 1000 ms. The fourth, 4 over 1.5 s: (2.67 - 2) / 2 * 1500 ms.
        assert await admitted_at(limits, "EXTERNAL", 4) == [0, 0, 500, 1000]
        # A throttle is at most one window (quota.window.size.seconds).
        assert await admitted_at(limits, "EXTERNAL", 1) == [2000]
        # Over a longer run the broker keeps to its rate.
        times = await admitted_at(limits, "EXTERNAL", 20)
        assert (times[-1] - times[0]) / 1000 >= 19 / 2 - 1

    run(main)


def test_inter_broker_listener_is_exempt_from_the_broker_wide_rate() -> None:
    async def main() -> None:
        limits = limits_with(max_connection_creation_rate="2")
        assert await admitted_at(limits, "EXTERNAL", 2) == [0, 0]
        # The broker-wide rate is full, but the inter-broker listener is held only to its
        # own (the broker-wide value, as Kafka's listener prefix override)...
        assert await admitted_at(limits, "PLAINTEXT", 3) == [0, 0, 500]
        # ... and its connections are not counted in the broker-wide rate: 3 over 1.5 s is
        # within it (with them, 6 would be over).
        assert await admitted_at(limits, "EXTERNAL", 1) == [500]

    run(main)


def test_listener_rate_applies_to_its_listener_only() -> None:
    async def main() -> None:
        limits = limits_with(listener_name_external_max_connection_creation_rate="1")
        assert await admitted_at(limits, "EXTERNAL", 2) == [0, 1000]
        assert await admitted_at(limits, "PLAINTEXT", 5) == [1000] * 5

    run(main)


def test_ip_over_its_rate_is_refused_and_taken_back_out_of_the_rates() -> None:
    async def main() -> None:
        limits = limits_with(max_connection_creation_rate="3")
        limits.quotas.update(QuotaEntity(None, None, DEFAULT), {"connection_creation_rate": "1"})
        limits.quotas.update(QuotaEntity(None, None, "10.0.0.2"), {"connection_creation_rate": "5"})
        await limits.admit("EXTERNAL", "10.0.0.1")
        with pytest.raises(ConnectionThrottled) as throttled:
            await limits.admit("EXTERNAL", "10.0.0.1")
        assert throttled.value.throttle_ms == 1000  # (2 - 1) / 1 * 1000 ms
        assert limits.by_host["10.0.0.1"] == 1  # not counted in
        # The refused one is out of the broker's rate: two more fit under its 3 a second.
        await limits.admit("EXTERNAL", "10.0.0.2")  # its own quota, over the default's
        await limits.admit("EXTERNAL", "10.0.0.2")
        assert trio.current_time() == 0
        # A quota of 0 refuses every connection for a whole window.
        limits.quotas.update(QuotaEntity(None, None, "10.0.0.3"), {"connection_creation_rate": "0"})
        with pytest.raises(ConnectionThrottled) as throttled:
            await limits.admit("EXTERNAL", "10.0.0.3")
        assert throttled.value.throttle_ms == 1000
        # The default's quota removed: the address is no longer measured.
        limits.quotas.update(QuotaEntity(None, None, DEFAULT), {})
        assert limits.quotas.connection_rate("10.0.0.1") is None

    run(main)


def test_count_limits_wait_and_per_ip_limit_refuses() -> None:
    async def main() -> None:
        limits = limits_with(max_connections="2", max_connections_per_ip="1")
        await limits.admit("EXTERNAL", "10.0.0.1")
        with pytest.raises(TooManyConnections):
            await limits.admit("EXTERNAL", "10.0.0.1")
        await limits.admit("EXTERNAL", "10.0.0.2")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(limits.admit, "EXTERNAL", "10.0.0.3")
            await trio.testing.wait_all_tasks_blocked()
            assert limits.by_host["10.0.0.3"] == 0  # waits for room
            limits.release("EXTERNAL", "10.0.0.2")
        assert limits.by_host["10.0.0.3"] == 1

    run(main)


def test_validation_checks_listener_values_with_the_broker_wide_fallback() -> None:
    validate(limits_with(max_connection_creation_rate="5").config)
    for bad in (
        {"max_connection_creation_rate": "0"},
        {"listener_name_external_max_connection_creation_rate": "0"},
        {"max_connections": "0"},
    ):
        with pytest.raises(Exception, match="Invalid max.connection"):
            validate(limits_with(**bad).config)


def test_only_the_inter_broker_listener_goes_beyond_max_connections_and_asks_for_room() -> None:
    """KIP-402: at `max.connections`, EXTRA waits while PLAINTEXT (inter-broker) is admitted;
    the broker is then over by one (`excess`), and `on_excess` is told, at that admission and
    when the limit is lowered."""

    async def main() -> None:
        limits = limits_with(max_connections="2")
        told: list[int] = []
        limits.on_excess = lambda: told.append(limits.excess())
        await admitted_at(limits, "EXTERNAL", 2)
        assert (limits.protected("PLAINTEXT"), limits.protected("EXTERNAL")) == (True, False)
        await limits.admit("PLAINTEXT", "10.0.0.1")
        assert told == [1]
        limits.config = BrokerConfig({**limits.config.values, "max.connections": "1"})
        limits.reconfigure(frozenset({"max.connections"}))
        assert told == [1, 2]
        limits.release("EXTERNAL", "10.0.0.1")
        limits.release("EXTERNAL", "10.0.0.1")
        assert limits.excess() == 0 and "EXTERNAL" not in limits.by_listener

    run(main)


def test_overrides_are_read_once_per_change_their_host_names_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`max.connections.per.ip.overrides` is parsed (and localhost resolved) when `run` starts
    and at each change of it, not per connection; a name that does not resolve fails the
    start, and later keeps the previous overrides."""
    parsed: list[str] = []
    real_parse = connection_limits.parse_overrides

    def counting_parse(text: str) -> dict[str, int]:
        parsed.append(text)
        return real_parse(text)

    monkeypatch.setattr(connection_limits, "parse_overrides", counting_parse)

    async def main() -> None:
        limits = limits_with(max_connections_per_ip_overrides="localhost:1,10.0.0.2:3")
        async with trio.open_nursery() as nursery:
            await nursery.start(limits.run)
            assert limits.overrides == {"127.0.0.1": 1, "10.0.0.2": 3}
            await limits.admit("EXTERNAL", "127.0.0.1")
            with pytest.raises(TooManyConnections):
                await limits.admit("EXTERNAL", "127.0.0.1")
            for _ in range(3):
                await limits.admit("EXTERNAL", "10.0.0.2")
            assert len(parsed) == 1
            for text in ("10.0.0.2:4", "no-such-host.invalid:1"):
                limits.config = BrokerConfig(
                    {**limits.config.values, "max.connections.per.ip.overrides": text}
                )
                limits.reconfigure(frozenset({"max.connections.per.ip.overrides"}))
                await trio.testing.wait_all_tasks_blocked()
                assert limits.overrides == {"10.0.0.2": 4}
            assert len(parsed) == 3
            nursery.cancel_scope.cancel()
        bad = limits_with(max_connections_per_ip_overrides="no-such-host.invalid:1")
        with pytest.raises(ConfigError, match="cannot resolve no-such-host.invalid"):
            await bad.run()

    run(main)
