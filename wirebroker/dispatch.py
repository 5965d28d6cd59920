"""The handler registry, request context, and turning failures into Kafka error responses.

Each handler module registers its API with :func:`handles`, naming the versions it implements,
which must be those of the table of handled APIs (`wirebroker.handlers.HANDLED`): ApiVersions
answers from the table (`VERSIONS`), so what we advertise is exactly what we implement, and a
handler module is imported on its API's first lookup in `REGISTRY`. This module owns the three levels of failure from DESIGN.md: a connection-level problem (unknown key
or version, malformed frame) is reported to the caller, which closes the connection; a request
level :class:`KafkaError` becomes that API's error response; a bug inside a handler is logged
with its traceback and answered the same way. `trio.Cancelled` always propagates.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from protocol.errors import ErrorCode, KafkaError
from protocol.messages import APIS
from protocol.messages.headers import RequestHeader
from protocol.schema import Message, Struct
from wirebroker import handlers
from wirebroker.authorizer.acls import (
    AUTHORIZATION_ERRORS,
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bits,
)
from wirebroker.quotas import throttle

if TYPE_CHECKING:
    from wirebroker.broker import Broker
    from wirebroker.metrics import RequestStats

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)


class Later:
    """A handler's answer when its work is done and only a wait remains (Kafka's purgatory).

    `finish` waits and returns the response; it must not hold on to the request. The connection
    may handle the requests behind this one meanwhile, and still answers in request order.
    """

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("finish",)

    def __init__(self, finish: Callable[[], Awaitable[Message]]) -> None:
        self.finish = finish


Handler = Callable[["RequestContext", Any], Awaitable[Message | Later | None]]


class RequestContext:
    """What a handler knows about the request besides its body, and what its sender may do.

    The authorization helpers are Kafka's AuthHelper: without an authorizer everything is
    allowed (as Kafka), except acting as a broker (`authorize_cluster_action`).
    """

    __slots__ = (
        "broker",
        "header",
        "client_host",
        "listener_name",
        "principal",
        "request_size",
        "throttle_time_ms",
        "quota_started",
        "remote_s",
        "timed",
        "spliced",
    )

    def __init__(
        self,
        broker: Broker,
        header: RequestHeader,
        client_host: str,
        listener_name: str,
        principal: str = "User:ANONYMOUS",
        request_size: int = 0,
    ) -> None:
        self.broker = broker
        self.header = header
        self.client_host = client_host
        self.listener_name = listener_name
        #: Who sent it: `User:<name>` after SASL, `User:ANONYMOUS` on a PLAINTEXT listener.
        self.principal = principal
        #: The request's size in bytes (its frame), what `producer_byte_rate` counts.
        self.request_size = request_size
        #: How long the client's connection is throttled for this request (client quotas).
        self.throttle_time_ms = 0
        #: The task time the request started at, while its request quota is not yet recorded.
        self.quota_started: float | None = None
        #: Seconds the handler spent waiting on others (Kafka's remote time: `waiting`).
        self.remote_s = 0.0
        #: The request metrics its times go to (`BrokerStats.request_done`); empty: not timed.
        self.timed: tuple[RequestStats, ...] = ()
        #: An array field of the handler's answer given as its items' encodings (kept by the
        #: handler), written in their place (`protocol.spliced`); None: the answer as it is.
        self.spliced: tuple[str, Sequence[bytes]] | None = None

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """The time in this block is the request's remote time (a long poll, a rebalance: what
        Kafka leaves in purgatory), not its local time, in the request metrics."""
        started = perf_counter()
        try:
            yield
        finally:
            self.remote_s += perf_counter() - started

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def api_name(self) -> str:
        return APIS[self.header.request_api_key].name

    # authorization ----------------------------------------------------------------------------
    def authorize(
        self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_if_allowed: bool = True,
        log_if_denied: bool = True,
    ) -> bool:
        """May the sender do `operation` on the resource? (Kafka's authorize: a denial is
        logged unless `log_if_denied` is off, for filters and bit fields.)"""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal,
            self.client_host,
            self.api_name,
            operation,
            resource_type,
            name,
            log_if_allowed=log_if_allowed,
            log_if_denied=log_if_denied,
        )

    def authorize_cluster(self, operation: AclOperation, *, log_if_denied: bool = True) -> bool:
        """`authorize` on the cluster resource (`kafka-cluster`)."""
        return self.authorize(
            operation, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=log_if_denied
        )

    def require(self, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
        """`authorize`, or a KafkaError carrying the resource type's authorization error
        (TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED), which the dispatcher
        answers wherever the response has an error code: for a request refused as a whole."""
        if not self.authorize(operation, resource_type, name):
            raise KafkaError(
                f"{self.principal} may not {operation.name} {resource_type.name} {name}",
                error_code=AUTHORIZATION_ERRORS[resource_type],
            )

    def require_cluster(self, operation: AclOperation) -> None:
        """Kafka's authorizeClusterOperation: `require` on the cluster resource."""
        self.require(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized(
        self,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
        *,
        log_if_denied: bool = True,
    ) -> set[str]:
        """Kafka's filterByAuthorized: which of the names the sender may `operation`."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return set(names)
        return authorizer.authorized_names(
            self.principal,
            self.client_host,
            self.api_name,
            operation,
            resource_type,
            names,
            log_if_denied=log_if_denied,
        )

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may the sender `operation` some resource of the type?"""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize_any(
            self.principal, self.client_host, self.api_name, operation, resource_type
        )

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations bit field of a resource (every supported operation
        without an authorizer)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return operations_bits(SUPPORTED_OPERATIONS[resource_type])
        return authorizer.authorized_operations(
            self.principal, self.client_host, resource_type, name
        )

    def authorize_cluster_action(self, *, log_if_denied: bool = True) -> bool:
        """May the sender act as a broker (LeaderAndIsr, a follower's Fetch, ...)? Kafka asks
        for CLUSTER_ACTION on the cluster. Here also, with or without an authorizer: it must be
        a cluster member's peer (the embedded broker has none) and come in on the inter-broker
        listener."""
        broker = self.broker
        if not broker.cluster_mode:
            return False
        if self.listener_name != broker.config.inter_broker_listener_name():
            return False
        return self.authorize_cluster(AclOperation.CLUSTER_ACTION, log_if_denied=log_if_denied)

    def require_cluster_action(self) -> None:
        """`authorize_cluster_action` or CLUSTER_AUTHORIZATION_FAILED for the whole request."""
        if not self.authorize_cluster_action():
            if not self.broker.cluster_mode:
                why = "this broker is embedded (no zookeeper.connect): it has no peers"
            elif self.listener_name != self.broker.config.inter_broker_listener_name():
                why = (
                    f"it came in on listener {self.listener_name}, not on the inter-broker "
                    f"listener {self.broker.config.inter_broker_listener_name()}"
                )
            else:
                why = f"{self.principal} may not CLUSTER_ACTION the cluster"
            raise KafkaError(
                f"refused {self.api_name} from {self.principal} at {self.client_host}: {why}",
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            )


class Registration:
    __slots__ = ("api_key", "min_version", "max_version", "handler")

    def __init__(self, api_key: int, min_version: int, max_version: int, handler: Handler) -> None:
        self.api_key = api_key
        self.min_version = min_version
        self.max_version = max_version
        self.handler = handler


#: The versions of every handled API, by API key (what ApiVersions advertises).
VERSIONS: dict[int, tuple[int, int]] = {
    key: handlers.HANDLED[info.name][1:]
    for key, info in sorted(APIS.items())
    if info.name in handlers.HANDLED
}


class _Registry(dict[int, Registration]):
    """The registered handlers by API key: the first lookup of a handled API's key imports
    its module, which registers it."""

    def __missing__(self, api_key: int) -> Registration:
        if api_key not in VERSIONS:
            raise KeyError(api_key)
        module = handlers.HANDLED[APIS[api_key].name][0]
        importlib.import_module(f"{handlers.__name__}.{module}")
        return dict.__getitem__(self, api_key)


REGISTRY: dict[int, Registration] = _Registry()


class CloseConnection(Exception):
    """Raised by the connection or a handler to end the connection after logging why.

    Kafka closes a connection rather than answer in two cases we share: a request it cannot
    parse or does not support, and a failed acks=0 produce (so the producer notices and
    refreshes its metadata).
    """


def handles(request_class: type[M], versions: tuple[int, int]) -> Callable[[Handler], Handler]:
    """Register `handler` for `request_class` over the inclusive `versions` range, which
    `wirebroker.handlers.HANDLED` must give it, with the handler's module."""
    lo, hi = versions
    info = APIS[request_class.API_KEY]
    assert info.min_version <= lo <= hi <= info.max_version, (request_class, versions)

    def register(handler: Handler) -> Handler:
        module = handler.__module__.removeprefix(f"{handlers.__name__}.")
        table = handlers.HANDLED.get(info.name)
        if table != (module, lo, hi):
            raise ValueError(
                f"{handler.__module__} handles {info.name} v{lo}-v{hi}, but "
                f"wirebroker.handlers.HANDLED says {table}: make them the same"
            )
        REGISTRY[request_class.API_KEY] = Registration(request_class.API_KEY, lo, hi, handler)
        return handler

    return register


def supported(api_key: int, version: int) -> bool:
    versions = VERSIONS.get(api_key)
    return versions is not None and versions[0] <= version <= versions[1]


async def dispatch(ctx: RequestContext, body: Message) -> Message | Later | None:
    """Run the handler; a KafkaError or a bug becomes this API's error response. The
    response carries the request's throttle time (`wirebroker.quotas.throttle`)."""
    reg = REGISTRY[ctx.header.request_api_key]
    if ctx.broker.quotas.request.enabled:
        throttle.request_started(ctx)
    error = ErrorCode.NONE
    try:
        response = await reg.handler(ctx, body)
    except CloseConnection:
        raise
    except KafkaError as e:
        log.info("%s v%d failed: %s", type(body).__name__, ctx.api_version, e)
        error = e.error_code
        response = error_response(ctx, body, error)
    except Exception:
        log.exception("%s v%d: unexpected error in handler", type(body).__name__, ctx.api_version)
        error = ErrorCode.UNKNOWN_SERVER_ERROR
        response = error_response(ctx, body, error)
    if ctx.quota_started is not None:
        throttle.request_throttle(ctx)
    throttle_ms = ctx.throttle_time_ms
    if throttle_ms and response is not None:
        if isinstance(response, Later):
            response = Later(partial(_throttled_later, response, throttle_ms))
        else:
            throttle.set_throttle_time(response, throttle_ms)
    stats = ctx.broker.stats
    if stats.on:
        answer = None if isinstance(response, Later) else response
        ctx.timed = stats.request_done(ctx.header, body, answer, error)
    return response


async def _throttled_later(later: Later, throttle_ms: int) -> Message:
    response = await later.finish()
    throttle.set_throttle_time(response, throttle_ms)
    return response


def error_response(ctx: RequestContext, body: Message, code: ErrorCode) -> Message:
    """A response that carries `code` wherever the response has an error code.

    Topic and partition lists are mirrored from the request by name, as Kafka's
    `getErrorResponse` does, so that every partition the client asked about gets the code.
    Only the fields of the request's version are filled: a list a later version added (a
    LeaderAndIsr v2 answer has no `topics`) stays empty.
    """
    info = APIS[ctx.header.request_api_key]
    ctx.spliced = None  # what the handler kept for its own answer is not this one's
    response = info.response_class()()
    _fill(response, body, int(code), ctx.api_version)
    return response


def _fill(target: Struct, source: Struct | None, code: int, version: int) -> None:
    for f in type(target).FIELDS:
        if not f.present_in(version):
            continue
        if f.name == "error_code" and f.type == "int16":
            target.error_code = code  # type: ignore[attr-defined]
        elif (
            f.struct is not None
            and f.type.startswith("[]")
            and source is not None
            and f.tag is None
        ):
            # (a tagged list, Produce's node_endpoints, mirrors nothing of the request)
            mirror = _matching_list(source, f.name)
            if mirror is not None:
                items = []
                for src in mirror:
                    item = f.struct()
                    _copy_keys(item, src, version)
                    _fill(item, src, code, version)
                    items.append(item)
                setattr(target, f.name, items)


def _matching_list(source: Struct, target_name: str) -> list[Any] | None:
    """The request's list that a response list mirrors (topics/partitions by shape)."""
    lists = [
        f.name for f in type(source).FIELDS if f.type.startswith("[]") and f.struct is not None
    ]
    for name in lists:
        if name == target_name or _stem(name) == _stem(target_name):
            value = getattr(source, name)
            return value if isinstance(value, list) else None
    if len(lists) == 1:
        value = getattr(source, lists[0])
        return value if isinstance(value, list) else None
    return None


def _stem(name: str) -> str:
    for word in ("topic", "partition", "group", "resource", "transaction"):
        if word in name:
            return word
    return name


def _copy_keys(target: Struct, source: Struct, version: int) -> None:
    """Copy identifying fields (names, ids, indexes) from a request item to a response item;
    a null name (a Metadata topic asked by id) is copied as "" where the answer's cannot be
    null, as Kafka's MetadataRequest.getErrorResponse does."""
    fields = {f.name: f for f in type(target).FIELDS if f.present_in(version)}
    for f in type(source).FIELDS:
        if f.type.startswith("[]"):
            continue
        value = getattr(source, f.name)
        for candidate in (f.name, _RENAMES.get(f.name, "")):
            copied = fields.get(candidate)
            if copied is None:
                continue
            if value is None and not copied.nullable_in(version):
                if copied.type != "string":
                    continue
                value = ""
            setattr(target, candidate, value)


_RENAMES = {
    "index": "partition_index",
    "partition": "partition_index",
    "partition_index": "index",
    "topic": "name",
    "name": "topic",
    "topic_id": "topic_id",
}
