"""One client connection: frames in, responses out, strictly in order.

This module owns the life of a connection: reading bytes straight into a `FrameBuffer` (which
refuses a frame over `socket.request.max.bytes` before reading its body), decoding each
request, handing it to the dispatcher, and writing the responses in request order, as Kafka
guarantees. The requests that arrived together are handled one after the other and their
responses written together in one system call; before a handler that may wait (any not in
`_IMMEDIATE_KEYS`) the responses ahead of it are written. A Fetch parked on a partition a
Produce appended to answers right after that Produce's acknowledgement is written: a producer
with one request in flight (row 4's) sends its next records only on that acknowledgement, so
it goes first. acks=0 Produce gets no response.
A malformed frame, or an API key or version we do not implement, is logged and closes this
connection only (ApiVersions of an unknown version gets the KIP-511 answer instead). A
connection idle (nothing read or written) for `connections.max.idle.ms` is closed, and one
quiet for `BUFFER_IDLE_S` gives back its receive buffer, both by the broker's one
`ConnectionWatch` task (as Kafka's selector checks its idle channels): a connection waiting
for bytes needs no timer of its own.
A connection comes here once its listener's acceptor admitted it under the connection quotas
(`wirebroker.connection_limits`), which it gives back when it closes. Bytes come and go
through the connection's transport (`wirebroker.transport`): the socket itself on a PLAINTEXT or
SASL_PLAINTEXT listener, TLS (`wirebroker.tls`, after its handshake) on an SSL one. On a SASL
listener every frame goes to the connection's `SaslAuthenticator` until it is authenticated
(frames of at most `sasl.server.max.receive.size` until then); its principal then goes with
every request. A failed authentication (wrong credentials, a mechanism not offered, a request out
of turn) is answered and its connection closed only after
`connection.failed.authentication.delay.ms`, as Kafka, so guessing passwords is slow; other
connections are served meanwhile (an exchange whose principal cannot be made closes at once,
as Kafka's). With `connections.max.reauth.ms` a session past its lifetime closes at its next
request unless that is a SaslHandshake, which re-authenticates (KIP-368; at most once a second,
as Kafka).

A request that broke a client quota (`wirebroker.quotas`) is answered at once with its
throttle time, and then the connection is muted for that time, as Kafka mutes the channel
(KIP-219): the answers already due are written, and no further request is handled or read,
even one already received (pipelined), until the throttle time has passed.

With the metrics on (`wirebroker.metrics`), each request's times are taken here: when its
last byte was read, when its handler started and returned, when its response was ready and
when the write that carried it began and ended.

Where it differs from Kafka: Kafka reads nothing more from a connection until its current
request is answered. Here a handler whose work is done and which only waits (a
:class:`~wirebroker.dispatch.Later`: an acks=all Produce waiting for its followers, a Fetch
long-polling for data) waits in a task of its own while the connection goes on with the next
requests, up to `MAX_WAITING_PER_CONNECTION` at once. A producer's pipelined batches are then
appended back to back and replicated together, instead of one follower round trip each, and
the requests a client sends behind a long-polling Fetch are handled at once; their answers
still leave in request order. A `Later` whose answer is throttled mutes the connection from
then on.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Any

import trio
from trio.lowlevel import wait_readable

from protocol.api import (
    API_VERSIONS_KEY,
    api_info,
    decode_request,
    encode_response_chunks,
    peek_request_header,
    unsupported_api_versions_response,
)
from protocol.errors import ProtocolError
from protocol.framing import NEED_DATA, FrameBuffer
from protocol.messages import APIS
from protocol.messages.headers import ResponseHeader
from wirebroker.dispatch import (
    REGISTRY,
    CloseConnection,
    Later,
    RequestContext,
    dispatch,
    supported,
)
from wirebroker.metrics import READY, Timing, request_sent
from wirebroker.quotas.entities import ip_address
from wirebroker.transport import PlainTransport, Transport, release

if TYPE_CHECKING:
    import ssl

    from wirebroker.broker import Broker
    from wirebroker.sasl.authenticator import SaslAuthenticator
    from wirebroker.tls import PrincipalMapper

log = logging.getLogger(__name__)

# Handlers that never wait in the connection's own task: Produce (its replication wait is a
# `Later`), Fetch (its long poll is a `Later`), ListOffsets, Metadata, OffsetCommit,
# OffsetFetch, FindCoordinator, ApiVersions.
_IMMEDIATE_KEYS = frozenset({0, 1, 2, 3, 8, 9, 10, 18})
# Seconds without a byte after which a connection drops its receive buffer (the next one starts
# small again).
BUFFER_IDLE_S = 1.0
# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: re-authentications of a connection
# begin at least this far apart.
MIN_REAUTHENTICATION_INTERVAL_S = 1.0
# Requests of one connection that may wait for their answer at once, as the Java producer's
# `max.in.flight.requests.per.connection` (and idempotent librdkafka's) default.
MAX_WAITING_PER_CONNECTION = 5


class _Slot:
    """One response's place in the connection's answer order, and its request's times (when
    requests are timed: `wirebroker.metrics`)."""

    __slots__ = ("chunks", "timing")

    def __init__(self, chunks: list[Any] | None, timing: Timing | None) -> None:
        self.chunks = chunks
        self.timing = timing


class _Outbox:
    """The responses not yet written, in request order; a slot may be filled later.

    `flush` writes the filled slots at the head and stops at the first unfilled one, so no
    answer overtakes an earlier one. One task writes at a time: a flush that finds another in
    progress returns at once, and the writing task picks up what became ready meanwhile.
    With `gather`, the flush first lets the other tasks ready in the same scheduler pass run,
    so answers completed by one event (a moved high watermark completes every acks=all Produce
    it covers) fill their slots and leave in one write, not one each.
    """

    __slots__ = ("transport", "slots", "_writing", "wrote")

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.slots: deque[_Slot] = deque()
        self._writing = False
        #: A write since the connection began to wait for bytes and the watch last looked
        #: (its least-recently-used order).
        self.wrote = False

    def has_ready(self) -> bool:
        """Whether a flush would write something now."""
        return bool(self.slots) and self.slots[0].chunks is not None

    def put(self, chunks: list[Any] | None, timing: Timing | None = None) -> _Slot:
        slot = _Slot(chunks, timing)
        self.slots.append(slot)
        return slot

    async def flush(self, *, gather: bool = False) -> None:
        if self._writing:
            return
        self._writing = True
        try:
            slots = self.slots
            if gather and self.has_ready():
                await trio.lowlevel.checkpoint()
            while slots and slots[0].chunks is not None:
                ready: list[list[Any]] = []
                timed: list[Timing] = []
                while slots and (chunks := slots[0].chunks) is not None:
                    ready.append(chunks)
                    if (timing := slots.popleft().timing) is not None:
                        timed.append(timing)
                began = perf_counter() if timed else 0.0
                try:
                    await self.transport.send_frames(ready)
                    self.wrote = True
                finally:
                    for chunks in ready:
                        release(chunks)
                if timed:
                    ended = perf_counter()
                    for timing in timed:
                        request_sent(timing, began, ended)
        finally:
            self._writing = False

    def discard(self) -> None:
        """Unpin what the unwritten responses held (the connection is closing)."""
        for slot in self.slots:
            if slot.chunks is not None:
                release(slot.chunks)
        self.slots.clear()


class ConnectionWatch:
    """The broker's live connections, and the task that closes the idle ones and takes the
    receive buffer of the quiet ones. (A trio timer per wait for bytes cost ≈7 µs to set up and
    take down, twice per record of bench row 4.) It also makes room when the broker holds more
    than `max.connections` (`close_excess`)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.live: set[_Connection] = set()
        broker.connection_limits.on_excess = self.close_excess

    def close_excess(self) -> None:
        """Kafka's closeExcessConnections (KIP-402): while the broker holds more than
        `max.connections` (the inter-broker listener took one beyond it, or the limit was
        lowered), close the least recently used connection of a listener other than the
        protected inter-broker one: the one whose last read or write is oldest, as Kafka's
        selector's lowestPriorityChannel (its lruConnections, updated on both). Connections
        already closing count as room made."""
        limits = self.broker.connection_limits
        excess = limits.excess() - sum(1 for c in self.live if c.closing)
        if excess <= 0:
            return
        candidates = [
            c for c in self.live if not c.closing and not limits.protected(c.listener_name)
        ]
        now = trio.current_time()
        for connection in heapq.nsmallest(excess, candidates, key=lambda c: c.last_used(now)):
            log.info(
                "closing connection from %s on %s: the broker holds more than max.connections",
                connection.client_host,
                connection.listener_name,
            )
            connection._close()

    async def run(self) -> None:
        while True:
            idle_s = self.broker.config.connections_max_idle_ms / 1000
            await trio.sleep(min(BUFFER_IDLE_S, idle_s) / 4)
            now = trio.current_time()
            for connection in list(self.live):
                connection.check_idle(now, idle_s)


def peer_of(stream: trio.SocketStream) -> tuple[str, int]:
    """The client's address (canonical: an IPv4-mapped one as IPv4) and port; ("?", 0) when
    the socket no longer knows it."""
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return "?", 0
    host = str(peer[0])
    return ip_address(host) or host, int(peer[1])


async def serve_connection(
    stream: trio.SocketStream,
    peer: tuple[str, int],
    broker: Broker,
    listener_name: str,
    watch: ConnectionWatch,
    tls: tuple[ssl.SSLContext, PrincipalMapper] | None = None,
) -> None:
    """Serve one connection the connection quotas admitted (`peer_of` it) until the peer
    closes it, it idles out, or misbehaves; then give it back to the quotas.

    With `tls` (an SSL listener's context and principal mapping), the TLS handshake comes
    first; a failed one is logged in one line and closes this connection only.
    """
    sock = stream.socket
    client_host = peer[0]
    limits = broker.connection_limits
    broker.stats.connection_opened(listener_name, broker.now_ms())
    connection: _Connection | None = None
    try:
        transport: Transport
        if tls is None:
            transport = PlainTransport(sock)
        else:
            from wirebroker.tls import HandshakeFailed, TlsTransport  # SSL listeners only

            transport = TlsTransport(sock.fileno(), tls[0])
            try:
                await transport.handshake(broker.config.connections_max_idle_ms / 1000, tls[1])
            except HandshakeFailed as e:
                log.warning("closing connection from %s:%s: %s", peer[0], peer[1], e)
                return
        connection = _Connection(broker, transport, client_host, listener_name)
        watch.live.add(connection)
        async with trio.open_nursery() as nursery:
            await connection.serve(nursery)
            nursery.cancel_scope.cancel()  # answers still waiting have no one to go to
    finally:
        if connection is not None:
            watch.live.discard(connection)
        broker.stats.connection_closed(listener_name, broker.now_ms())
        limits.release(listener_name, client_host)
        if connection is not None:
            connection.outbox.discard()
        with trio.CancelScope(shield=True):
            await stream.aclose()


class _Connection:
    """One connection's reading loop, its ordered outbox, and the tasks of its `Later` answers."""

    __slots__ = (
        "broker",
        "transport",
        "client_host",
        "listener_name",
        "outbox",
        "waiting",
        "nursery",
        "sasl",
        "principal",
        "session",
        "reauthenticated_at",
        "unmuted_at",
        "frames",
        "waiting_since",
        "written_at",
    )

    def __init__(
        self, broker: Broker, transport: Transport, client_host: str, listener_name: str
    ) -> None:
        self.broker = broker
        self.transport = transport  # its `principal` is who the client is
        self.client_host = client_host
        self.listener_name = listener_name
        self.outbox = _Outbox(transport)
        self.waiting = trio.Semaphore(MAX_WAITING_PER_CONNECTION)
        self.nursery: trio.Nursery | None = None
        settings = broker.sasl_listeners.get(listener_name)
        #: Until a SASL connection is authenticated; None on a PLAINTEXT listener.
        self.sasl: SaslAuthenticator | None = None
        if settings is not None:
            # imported by a SASL listener's first connection (start-up time, docs/perf-notes.md)
            from wirebroker.sasl.authenticator import SaslAuthenticator

            self.sasl = SaslAuthenticator(broker, settings, client_host, listener_name)
        self.principal = transport.principal  # a TLS client certificate's, else ANONYMOUS
        #: (mechanism, expiry in ms) of a SASL session that must be renewed (KIP-368).
        self.session: tuple[str, int] | None = None
        #: The trio time its last re-authentication began (KIP-368); None before one.
        self.reauthenticated_at: float | None = None
        #: The trio time a throttled connection may read again (client quotas).
        self.unmuted_at = 0.0
        self.frames: FrameBuffer | None = None
        #: The trio time it started waiting for bytes; None while it is not waiting.
        self.waiting_since: float | None = None
        #: About when a response was last written: the watch's time of the tick that saw the
        #: outbox's `wrote` (a write costs the hot path one assignment, no clock read).
        self.written_at = 0.0

    def last_used(self, now: float) -> float:
        """When it was last in use, for Kafka's least-recently-used order: the later of when it
        began to wait for bytes (now while it is not waiting) and its last write while waiting
        (a `Later`'s answer; now if one came since the watch's last tick). A write before the
        wait is covered by the wait's time."""
        since = self.waiting_since
        if since is None or self.outbox.wrote:
            return now
        return max(since, self.written_at)

    async def serve(self, nursery: trio.Nursery) -> None:
        """Read and handle requests until the peer closes, idles out or misbehaves; never raises."""
        self.nursery = nursery
        try:
            await self._read_loop()
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", self.client_host, e)
        except CloseConnection as e:
            log.warning("closing connection from %s: %s", self.client_host, e)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:
            # A bug must cost this connection only, never the broker.
            log.exception("closing connection from %s after an unexpected error", self.client_host)

    async def _read_loop(self) -> None:
        transport = self.transport
        max_frame_size = self.broker.config.socket_request_max_bytes
        self.frames = frames = FrameBuffer(
            max_frame_size if self.sasl is None else self.sasl.settings.max_receive_size
        )
        handled = False  # a round of requests was handled since this task last let others run
        drained = False  # the last read left nothing behind: wait before reading again
        while True:
            if drained:
                handled = drained = False  # waiting lets the others run
                self.waiting_since = trio.current_time()  # the watch closes it once idle
                self.outbox.wrote = False  # a write from now on is a use after this one
                await wait_readable(transport.fd)  # at once if bytes came meanwhile
                self.waiting_since = None
            # Read straight into the frame buffer (plaintext: no bytes object, no copy).
            room = frames.writable()
            try:
                n = transport.receive_into(room)
            except BlockingIOError:
                drained = True
                continue
            if not n:
                return
            frames.advance(n)
            short = n < len(room) and transport.short_read_drains  # took all the socket held
            arrived = perf_counter() if self.broker.stats.on else 0.0
            if handled:
                # More data at once after a round: let other connections run first. (When the
                # read would block, the wait does that, so the usual round costs no extra pass
                # through trio's scheduler.)
                await trio.lowlevel.checkpoint()
            # Every whole frame that arrived is handled before anything is written, and their
            # responses leave together in one system call (pipelined clients send several).
            handled_frames = 0
            try:
                while (frame := frames.next_frame()) is not NEED_DATA:
                    handled_frames += 1
                    if self.unmuted_at and self.unmuted_at > trio.current_time():
                        await self._throttled()  # a `Later` answer was throttled meanwhile
                    if self.session is not None and self.sasl is None:
                        self._check_session(frame)  # type: ignore[arg-type]
                    if self.sasl is None:
                        await self._handle_frame(frame, arrived)  # type: ignore[arg-type]
                        if self.unmuted_at and self.unmuted_at > trio.current_time():
                            await self._throttled()
                            # Kafka reads nothing while muted: what waited here arrives now.
                            arrived = perf_counter() if arrived else 0.0
                    elif await self._authenticate(frame):  # type: ignore[arg-type]
                        frames.max_frame_size = max_frame_size
            finally:
                await self.outbox.flush()
            handled = True
            # After a short read of at most one request, a client that waits for each answer
            # has sent nothing more (row 4: 310 of 97,700 rounds found more bytes at once), so
            # a read now would cost a system call and an exception for nothing: the next round
            # waits first. A pipelining client (several requests a round) likely sent more
            # meanwhile (bench row 1), and a read is cheaper than a wait then: read.
            drained = short and handled_frames <= 1

    def check_idle(self, now: float, idle_s: float) -> None:
        """Close the connection if it has waited for bytes `idle_s` and written nothing that
        long (Kafka's selector counts both as use: a long poll's late answer too); give back
        its receive buffer if it has waited `BUFFER_IDLE_S` (an idle connection costs no
        buffer memory; a busy one keeps reusing it)."""
        if self.outbox.wrote:
            self.outbox.wrote = False
            self.written_at = now
        since, frames = self.waiting_since, self.frames
        if since is None or frames is None:
            return
        if now - max(since, self.written_at) >= idle_s:
            log.info("closing connection from %s: idle for %.0f s", self.client_host, idle_s)
            assert self.nursery is not None
            self.nursery.cancel_scope.cancel()
        elif now - since >= BUFFER_IDLE_S and frames.capacity() and not frames.buffered():
            frames.release()

    async def _authenticate(self, frame: memoryview) -> bool:
        """Hand a frame to the SASL authenticator; True once the connection is authenticated."""
        assert self.sasl is not None
        step = await self.sasl.receive(frame)
        if step.close is not None and step.delay:
            await self.outbox.flush()  # what was answered before this frame leaves now
            await trio.sleep(
                self.broker.config.get_int("connection.failed.authentication.delay.ms") / 1000
            )
        if step.chunks is not None:
            self.outbox.put(step.chunks)
        if step.close is not None:
            await self.outbox.flush()
            raise CloseConnection(step.close)
        sasl = self.sasl
        if sasl.principal is None:
            return False
        self.principal = sasl.principal
        lifetime = sasl.session_lifetime_ms
        assert sasl.server is not None
        self.session = (
            (sasl.server.mechanism, self.broker.now_ms() + lifetime) if lifetime else None
        )
        self.sasl = None
        return True

    def _check_session(self, frame: memoryview) -> None:
        """A SaslHandshake renews the session, at most once a second (as Kafka's KafkaChannel:
        one sooner is a request, answered ILLEGAL_SASL_STATE); any other request after its
        expiry closes."""
        from wirebroker.sasl.authenticator import SASL_HANDSHAKE_KEY, SaslAuthenticator, shown

        assert self.session is not None
        mechanism, expires_ms = self.session
        if peek_request_header(frame)[0] == SASL_HANDSHAKE_KEY and self._may_reauthenticate():
            settings = self.broker.sasl_listeners[self.listener_name]
            self.sasl = SaslAuthenticator(
                self.broker,
                settings,
                self.client_host,
                self.listener_name,
                reauthenticating=(self.principal, mechanism),
            )
        elif self.broker.now_ms() >= expires_ms:
            raise CloseConnection(
                f"the SASL session of {shown(self.principal)} expired without re-authentication"
            )

    def _may_reauthenticate(self) -> bool:
        """Whether a SaslHandshake now begins a re-authentication (its time noted if so)."""
        now = trio.current_time()
        last = self.reauthenticated_at
        if last is not None and now - last < MIN_REAUTHENTICATION_INTERVAL_S:
            return False
        self.reauthenticated_at = now
        return True

    async def _throttled(self) -> None:
        """Mute the connection until its throttle time has passed; the answers already
        due (the throttled one among them) leave first."""
        await self.outbox.flush()
        await trio.sleep_until(self.unmuted_at)

    async def _handle_frame(self, frame: memoryview, arrived: float) -> None:
        """Handle one request (whose last byte was read at `arrived`, when timed); its
        response takes the next place in the outbox."""
        api_key, api_version, correlation_id = peek_request_header(frame)
        if not supported(api_key, api_version):
            if api_key == API_VERSIONS_KEY:
                reg = REGISTRY[API_VERSIONS_KEY]
                answer = unsupported_api_versions_response(
                    correlation_id, (reg.min_version, reg.max_version)
                )
                self.outbox.put([answer])
                return
            name = api_info(api_key).name if api_key in APIS else f"API key {api_key}"
            raise CloseConnection(f"{name} v{api_version} is not supported")
        request = decode_request(frame)
        if api_key not in _IMMEDIATE_KEYS:
            await self.outbox.flush()  # a handler that may wait must not hold back earlier answers
        started = perf_counter() if arrived else 0.0
        broker = self.broker
        ctx = RequestContext(
            broker,
            request.header,
            self.client_host,
            self.listener_name,
            self.principal,
            request_size=len(frame),
        )
        response = await dispatch(ctx, request.body)
        if ctx.throttle_time_ms:
            self.unmuted_at = max(
                self.unmuted_at, trio.current_time() + ctx.throttle_time_ms / 1000
            )
        if response is None:  # acks=0 produce
            if (timing := broker.stats.timing(ctx, arrived, started)) is not None:
                request_sent(timing, timing[READY], timing[READY])
            return
        header = ResponseHeader(correlation_id=correlation_id)
        if isinstance(response, Later):
            slot = self.outbox.put(None, broker.stats.timing(ctx, arrived, started))
            if self.waiting.value:
                self.waiting.acquire_nowait()
            else:
                await self.outbox.flush()  # then wait for an earlier request to be answered
                await self.waiting.acquire()
            assert self.nursery is not None
            self.nursery.start_soon(self._answer_later, response, slot, header, ctx)
            return
        chunks = encode_response_chunks(header, response, api_key, api_version, ctx.spliced)
        self.outbox.put(chunks, broker.stats.timing(ctx, arrived, started))

    async def _answer_later(
        self, later: Later, slot: _Slot, header: ResponseHeader, ctx: RequestContext
    ) -> None:
        """Wait for a `Later` response, fill its slot and write what is ready."""
        try:
            response = await later.finish()
            slot.chunks = encode_response_chunks(
                header, response, ctx.header.request_api_key, ctx.api_version, ctx.spliced
            )
            if slot.timing is not None:
                slot.timing[READY] = perf_counter()
            if ctx.throttle_time_ms:  # found throttled when its answer was ready
                self.unmuted_at = max(
                    self.unmuted_at, trio.current_time() + ctx.throttle_time_ms / 1000
                )
            self.waiting.release()
            # Other answers still waiting may have been completed by the same event.
            await self.outbox.flush(gather=self.waiting.value < MAX_WAITING_PER_CONNECTION)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            self._close()
        except Exception:
            log.exception("closing connection from %s after an unexpected error", self.client_host)
            self._close()

    def _close(self) -> None:
        assert self.nursery is not None
        self.nursery.cancel_scope.cancel()

    @property
    def closing(self) -> bool:
        """It was told to close (its quota given back once its task ends)."""
        return self.nursery is not None and self.nursery.cancel_scope.cancel_called
