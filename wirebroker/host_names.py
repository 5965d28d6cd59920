"""Host names read as Kafka's `InetAddress.getByName` reads them: an `ip` quota entity's name
and the hosts of `max.connections.per.ip.overrides`.

An IP address is taken as it is (canonical text, `quotas.entities.ip_address`); a host name is
resolved, and the first address is the one meant (IPv4 first, as Java orders them by default).
Resolving asks the system's resolver, which may wait on the network: `resolve` runs it in a
worker thread, never on the event loop.
"""

from __future__ import annotations

import socket

import trio

from wirebroker.quotas.entities import DEFAULT, QuotaEntity, ip_address
from wirebroker.zk.sanitizer import desanitize


def resolve_blocking(name: str) -> str | None:
    """The address `name` means; None when it does not resolve. May block: a worker thread's."""
    literal = ip_address(name)
    if literal is not None:
        return literal
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    # IPv4 first, as Java's order; the resolver's own order within each family
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return ip_address(str(infos[0][4][0])) if infos else None


async def resolve(name: str) -> str | None:
    """`resolve_blocking` off the loop (an address at once, without a thread)."""
    literal = ip_address(name)
    if literal is not None:
        return literal
    return await trio.to_thread.run_sync(resolve_blocking, name)


async def ip_entity_address(entity: QuotaEntity) -> str | None:
    """The address an `ip` quota entity's name means (Kafka's IpConfigHandler resolves it
    whenever it applies the entity's config); None for the default ip, another entity, or a
    name that does not resolve."""
    if entity.ip is None or entity.ip == DEFAULT:
        return None
    return await resolve(desanitize(entity.ip))
