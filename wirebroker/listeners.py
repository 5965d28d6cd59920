"""The broker's listeners: bound at start, added and removed at run time.

`BrokerListeners.run` binds every listener of the config, runs each one's acceptor (Kafka's
Acceptor: connections admitted by the connection quotas one at a time), reports the bound
ones, then follows changes of `listeners`, `advertised.listeners` and
`listener.security.protocol.map` (Kafka's dynamic listeners, KIP-226, set per broker only):
a new listener is bound and accepts, with
its TLS context, SASL settings and connection limits as at start; a removed one stops
accepting and its open connections are closed (their tasks cancelled), as Kafka's
`SocketServer.removeListeners`, and its metrics go once they are (its connection quotas'
at once). A new listener whose address cannot be bound (in use) is
logged, as Kafka's "Unable to start acceptor": the change stands (AlterConfigs was answered
when it was validated, and the config is kept), the listener is advertised from the config as
Kafka advertises it, and it is bound again only once removed and added back (Kafka's acceptor
is not started again either) or at the next start. Listeners are told apart by name, as
Kafka does: one kept under its name keeps its socket even if the value gives it another
address (logged; that address is bound at the next start). After a change the advertised
endpoints follow, and in a cluster the broker's registration `/brokers/ids/<id>` is written
again, which the controller follows with UpdateMetadata to every broker.

`validate_listeners` (Kafka's checks of the keys in any config, its KafkaConfig's) and
`validate_reconfiguration` (of a change, its DynamicListenerConfig's) hold Kafka's rules with
its messages; a new SSL or SASL_SSL listener's keystore must load (the start-up check).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import socket
from typing import TYPE_CHECKING

import trio

from wirebroker.config import LISTENER_PREFIXED, BrokerConfig, ConfigError, Listener
from wirebroker.connection import ConnectionWatch, peer_of, serve_connection
from wirebroker.connection_limits import ConnectionThrottled, TooManyConnections
from wirebroker.dynamic_config import SECURITY_KEYS, Reconfigurable

if TYPE_CHECKING:
    from wirebroker.broker import Broker
    from wirebroker.tls import ListenerContexts

log = logging.getLogger(__name__)

#: accept()'s errors of a process or system out of file descriptors or memory, retried after
#: ACCEPT_RETRY_S (as trio.serve_listeners).
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S = 0.1
#: The keys whose change adds or removes listeners (Kafka's listener registration keys).
LISTENER_KEYS = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})
#: Listener-prefixed keys an existing listener may change (Kafka's ListenerReconfigurableConfigs
#: of its SocketServer and DataPlaneAcceptor); with SECURITY_KEYS, the others are fixed.
_RECONFIGURABLE_PER_LISTENER = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)


def validate_listeners(old: BrokerConfig, config: BrokerConfig) -> None:
    """Kafka's checks of the listener keys of `config` when it reads one (its KafkaConfig),
    with its messages: each listener in the protocol map, names unique, ports unique (but for
    one IPv4 and one IPv6 address), the inter-broker listener (`old`'s: it is not dynamic)
    advertised, advertised listeners among the listeners."""
    listeners = _endpoints(config, config.get("listeners") or "", distinct_ports=True)
    advertised_text = config.get("advertised.listeners")
    advertised = _endpoints(config, advertised_text, False) if advertised_text else listeners
    names = list(dict.fromkeys(lst.name for lst in listeners))
    advertised_names = list(dict.fromkeys(lst.name for lst in advertised))
    if old.inter_broker_listener_name() not in advertised_names:
        raise ConfigError(
            "requirement failed: inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured listeners "
            f"are {','.join(advertised_names)}"
        )
    if not set(advertised_names) <= set(names):
        raise ConfigError(
            "requirement failed: advertised.listeners listener names must be equal to or a "
            f"subset of the ones defined in listeners. Found {','.join(advertised_names)}. The "
            f"valid options based on the current configuration are {','.join(names)}"
        )


def _endpoints(config: BrokerConfig, text: str, distinct_ports: bool) -> list[Listener]:
    """The listeners of a `listeners` or `advertised.listeners` value (Kafka's
    listenerListToEndPoints)."""
    protocols = _protocol_map(config)
    try:
        listeners = [Listener.parse(t) for t in text.split(",") if t.strip()]
    except ConfigError as e:
        raise ConfigError(f"Error creating broker listeners from '{text}': {e}") from None
    for lst in listeners:
        if lst.name not in protocols:
            raise ConfigError(
                f"Error creating broker listeners from '{text}': No security protocol defined "
                f"for listener {lst.name}"
            )
    if len({lst.name for lst in listeners}) != len(listeners):
        raise ConfigError(
            f"requirement failed: Each listener must have a different name, listeners: {text}"
        )
    if distinct_ports:
        for port in {lst.port for lst in listeners if lst.port != 0}:
            _check_port(text, port, [lst.host for lst in listeners if lst.port == port])
    return listeners


def _check_port(text: str, port: int, hosts: list[str]) -> None:
    """Listeners may share a port only as one IPv4 and one IPv6 address (Kafka's rule)."""
    if len(hosts) < 2:
        return
    ips = []
    for host in hosts:
        with contextlib.suppress(ValueError):
            ips.append(ipaddress.ip_address(host).version)
    if len(hosts) - len(ips) > 1:
        raise ConfigError(
            f"requirement failed: Each listener must have a different port, listeners: {text}"
        )
    if len(ips) == 2:
        if sorted(ips) != [4, 6] or len(hosts) > 2:
            raise ConfigError(
                "requirement failed: If you have two listeners on the same port then one needs "
                f"to be IPv4 and the other IPv6, listeners: {text}, port: {port}"
            )
    elif ips:
        raise ConfigError(
            "Each listener must have a different port unless exactly one listener has an IPv4 "
            f"address and the other IPv6 address, listeners: {text}, port: {port}"
        )


def validate_reconfiguration(old: BrokerConfig, new: BrokerConfig) -> None:
    """Kafka's rules for a change of the listener keys (its
    DynamicListenerConfig.validateReconfiguration; the config's own checks,
    `validate_listeners`, passed): a kept listener keeps its security protocol and its fixed
    `listener.name.<l>.*` keys; and, nothing insecure, a new SSL or SASL_SSL listener's
    keystore must load."""
    old_names = {lst.name for lst in old.listeners()}
    new_names = {lst.name for lst in new.listeners()}
    for name in sorted(old_names & new_names):
        if _fixed_listener_configs(new, name) != _fixed_listener_configs(old, name):
            raise ConfigError(
                f"Configs cannot be updated dynamically for existing listener "
                f"ListenerName({name}), restart broker or create a new listener for update"
            )
        if old.security_protocol(name) != new.security_protocol(name):
            raise ConfigError(
                f"Security protocol cannot be updated for existing listener ListenerName({name})"
            )
    for name in sorted(new_names - old_names):
        if new.uses_tls(name):
            from wirebroker.tls import server_context

            server_context(new, name)


def _protocol_map(config: BrokerConfig) -> dict[str, str]:
    protocols: dict[str, str] = {}
    for item in (config.get("listener.security.protocol.map") or "").split(","):
        name, sep, protocol = item.strip().partition(":")
        if sep:
            protocols[name.strip().upper()] = protocol.strip().upper()
    return protocols


def _fixed_listener_configs(config: BrokerConfig, listener: str) -> dict[str, str]:
    """A listener's `listener.name.<l>.*` values that only a restart changes."""
    prefix = f"listener.name.{listener.lower()}."
    return {
        name: value
        for name, value in config.current().items()
        if name.startswith(prefix)
        and (m := LISTENER_PREFIXED.fullmatch(name)) is not None
        and m[1] not in SECURITY_KEYS
        and m[1] not in _RECONFIGURABLE_PER_LISTENER
    }


class BrokerListeners:
    """The bound listeners (`bound`, by name, with their real ports) and the tasks serving
    them; `run` is their owner task, a child of the broker's nursery."""

    def __init__(
        self, broker: Broker, tls: ListenerContexts | None, watch: ConnectionWatch
    ) -> None:
        self.broker = broker
        #: The listeners' TLS contexts, made when the first SSL listener is (None before).
        self.tls = tls
        self.watch = watch
        self.bound: dict[str, Listener] = {}
        #: Listeners of the config whose bind failed (advertised all the same, as Kafka's).
        self.unbound: dict[str, Listener] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        config = broker.config
        self._receive_buffer = config.socket_buffer_bytes("socket.receive.buffer.bytes")
        self._send_buffer = config.socket_buffer_bytes("socket.send.buffer.bytes")
        if tls is not None:
            self._follow_tls(tls)

    def reconfigurable(self) -> Reconfigurable:
        """What the dynamic configs tell of a change of the listener keys."""
        return Reconfigurable(LISTENER_KEYS, self._reconfigure)

    def _reconfigure(self, changed: frozenset[str]) -> None:
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[list[Listener]]) -> None:
        """Bind every listener (an address in use fails the start), report them, then follow
        the changes of the listener keys."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for listener in self.broker.config.listeners():
                await self._open(listener)
            self.broker.advertised = advertised(self.broker.config, list(self.bound.values()))
            task_status.started(list(self.bound.values()))
            while True:
                await self._changed.wait()
                self._changed = trio.Event()
                await self._follow()

    async def _open(self, listener: Listener) -> None:
        assert self._nursery is not None
        try:
            sockets = await trio.open_tcp_listeners(listener.port, host=listener.host or None)
        except OSError as e:
            host = listener.host or "0.0.0.0"
            e.add_note(f"binding listener {listener.name} to {host}:{listener.port}")
            raise
        if self._receive_buffer is not None:
            # On the listening socket, before the first accept, as Kafka's Acceptor does: its
            # connections inherit it, and the window scale their handshake offers is chosen
            # for it.
            for s in sockets:
                s.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
        port = sockets[0].socket.getsockname()[1]
        self.bound[listener.name] = Listener(listener.name, listener.host or "0.0.0.0", port)
        scope = self._scopes[listener.name] = trio.CancelScope()

        async def accept() -> None:
            with scope:  # cancelled: the sockets close, and every connection of the listener
                await self._accept_connections(sockets, listener.name)
            if listener.name not in self.bound:  # removed, its connections closed: its
                self.broker.stats.listeners.pop(listener.name, None)  # metrics go (Kafka's)

        self._nursery.start_soon(accept)

    async def _accept_connections(self, sockets: list[trio.SocketListener], listener: str) -> None:
        """A listener's acceptor (Kafka's Acceptor): it accepts one connection, has the
        connection quotas (`wirebroker.connection_limits`) admit it, which may make it wait (a
        creation rate throttle, no room under `max.connections`), and only then accepts the
        next, so connections beyond the limits wait in the listen backlog. A connection the
        quotas refuse is closed: at once when its address holds its `max.connections.per.ip`,
        after the throttle time when the address is over its `connection_creation_rate`. The
        connections are served in tasks of its nursery."""
        async with trio.open_nursery() as nursery:
            for listening in sockets:
                nursery.start_soon(self._accept_from, listening, listener, nursery)

    async def _accept_from(
        self, listening: trio.SocketListener, listener: str, nursery: trio.Nursery
    ) -> None:
        limits = self.broker.connection_limits
        async with listening:
            while True:
                try:
                    stream = await listening.accept()
                except OSError as e:
                    if e.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    log.error("accepting on %s: %s; retrying in %s s", listener, e, ACCEPT_RETRY_S)
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                peer = peer_of(stream)
                try:
                    await limits.admit(listener, peer[0])
                except TooManyConnections as e:
                    log.warning("closing connection from %s: %s", peer[0], e)
                    await trio.aclose_forcefully(stream)
                    continue
                except ConnectionThrottled as e:
                    log.debug("connection from %s on %s %s", peer[0], listener, e)
                    nursery.start_soon(_close_after, stream, e.throttle_ms)
                    continue
                except BaseException:
                    await trio.aclose_forcefully(stream)
                    raise
                nursery.start_soon(self._serve, stream, peer, listener)

    async def _follow(self) -> None:
        """Make the bound listeners those of the config: close the removed, open the new;
        then advertise them (and register them again in a cluster)."""
        config = self.broker.config
        wanted = {lst.name: lst for lst in config.listeners()}
        self.broker.connection_limits.listeners_changed(list(wanted))
        self.unbound = {n: lst for n, lst in self.unbound.items() if n in wanted}
        for name in [n for n in self.bound if n not in wanted]:
            self._scopes.pop(name).cancel()
            if self.tls is not None:
                self.tls.contexts.pop(name, None)
            log.info("listener %s removed: no longer accepting, its connections closed",
                     self.bound.pop(name))  # fmt: skip
        await self.broker.key_sets_fetched()  # a new SASL listener's JWKS: before it opens
        for name, listener in wanted.items():
            if name in self.unbound:
                continue
            bound = self.bound.get(name)
            if bound is not None:
                if (
                    listener.port not in (0, bound.port)
                    or (listener.host or "0.0.0.0") != bound.host
                ):
                    log.warning(
                        "listener %s stays at %s: a new address of a listener is bound at the "
                        "next start (or give the listener another name)",
                        listener,
                        bound,
                    )
                continue
            try:
                failure = self.broker.key_set_failure(name)
                if failure is not None:
                    raise ConfigError(failure)
                if self.tls is not None:
                    await self.tls.add(name)
                elif config.uses_tls(name):
                    await self._tls_for(config)  # (made with the new listener's)
                await self._open(listener)
            except (OSError, ConfigError) as e:
                log.error("Unable to start acceptor for %s: %s", name, e)
                self.unbound[name] = listener
                continue
            log.info("listener %s added: accepting", self.bound[name])
        now = advertised(config, [*self.bound.values(), *self.unbound.values()])
        if now == self.broker.advertised:
            return
        self.broker.advertised = now
        log.info("advertised listeners now %s", ", ".join(map(str, now)))
        if self.broker.cluster is not None:
            await self.broker.cluster.register_again()

    async def _tls_for(self, config: BrokerConfig) -> None:
        """The TLS contexts, made with the first SSL listener (in a worker thread: the stores
        are read)."""
        from wirebroker.tls import ListenerContexts

        self.tls = await trio.to_thread.run_sync(ListenerContexts, config)
        self._follow_tls(self.tls)

    def _follow_tls(self, tls: ListenerContexts) -> None:
        self.broker.dynamic_config.add_reconfigurable(
            Reconfigurable(tls.follows, tls.reconfigure, tls.validate, tls.reload)
        )

    async def _serve(self, stream: trio.SocketStream, peer: tuple[str, int], listener: str) -> None:
        """One admitted connection, with `socket.send.buffer.bytes` (None: the system's
        default) and its listener's TLS context of the moment."""
        if self._send_buffer is not None:
            try:
                stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
            except OSError as e:  # as Kafka's Acceptor: the connection is closed, not the broker
                log.warning("closing a new connection on %s: %s", listener, e)
                self.broker.connection_limits.release(listener, peer[0])
                await trio.aclose_forcefully(stream)
                return
        context = self.tls.contexts[listener] if self.tls is not None else None
        await serve_connection(stream, peer, self.broker, listener, self.watch, context)


async def _close_after(stream: trio.SocketStream, delay_ms: int) -> None:
    """Kafka's delayed close of a throttled connection (`DelayedCloseSocket`)."""
    try:
        await trio.sleep(delay_ms / 1000)
    finally:
        await trio.aclose_forcefully(stream)


def advertised(config: BrokerConfig, bound: list[Listener]) -> list[Listener]:
    """What the broker advertises: `advertised.listeners`, else the bound listeners (a
    wildcard address advertised as 127.0.0.1)."""
    given = config.advertised_listeners()
    if given:
        return given
    return [
        Listener(b.name, "127.0.0.1" if b.host in ("0.0.0.0", "", "::") else b.host, b.port)
        for b in bound
    ]


def tls_contexts(config: BrokerConfig) -> ListenerContexts | None:
    """The listeners' TLS contexts; None when no listener is SSL or SASL_SSL, which then
    import no `wirebroker.tls` (start-up time, docs/perf-notes.md)."""
    if not any(config.uses_tls(listener.name) for listener in config.listeners()):
        return None
    from wirebroker.tls import ListenerContexts

    return ListenerContexts(config)
